// Package stepfollow follows one step for the operator CLI: it keeps the
// scheduler's latest record of the step by long-polling (a Session's
// watch), and copies the step's output from the node agent that runs it,
// byte for byte, resuming after a dropped connection from the last frame
// written, until the stream's exit frame (Session.Follow, Dump).
//
// A Session owns every goroutine it starts (the watch, the stall
// supervisor, the interrupt handler and the cancel it sends) and waits
// for them in Close.
package stepfollow
