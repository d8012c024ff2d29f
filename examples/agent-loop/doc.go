// Package agentloop holds the tests of the reference agent loop,
// agent.py (Python standard library only; see README.md): that the tools
// it gives a model are exactly those of api/agent.go, and that it drives a
// run through a gateway's tool API to its end.
package agentloop
