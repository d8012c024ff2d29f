// Package archtest holds tests that enforce the repository's architecture:
// every package is documented, packages import only what their layer
// allows, and mains hold flags, not business logic (cmd_test.go; see
// ../shared/STYLE.md). It has no code of its own.
package archtest
