// Package e2e holds end-to-end tests of a whole fleet: real scheduler and
// agentd processes on loopback, real containerd and gVisor sandboxes. It has
// no code of its own beyond the harness in its tests.
package e2e
