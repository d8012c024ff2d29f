// Package archtest holds tests that enforce the repository's architecture:
// every package is documented, and packages import only what their layer
// allows (see ../shared/STYLE.md). It has no code of its own.
package archtest
