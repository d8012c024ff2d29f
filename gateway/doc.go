// Package gateway is what browsers and integrators talk to
// (docs/GATEWAY.md): accounts, API keys, sign-in sessions, roles,
// workspaces, sessions, runs and the audit log, served as a JSON API under
// /v1, plus the web page and the step stream. Its JSON objects, state names
// and close codes are package api's (api/gateway.go, api/run.go,
// api/close.go), the contract web/src/api.ts is checked against.
//
// The gateway is stateless: its state is records in the scheduler's
// replicated record store (Store), changed only by compare-and-set, so
// several gateways can serve one scheduler cluster. Steps run through the
// scheduler's step API (Steps). A run's steps are sequenced by the Driver
// that every gateway runs; it too works only through compare-and-set on
// the run record, so gateways may come and go without a run being lost or
// a step submitted twice.
//
// A workspace's files and revisions live in the scheduler (its workspace
// API, Files); the gateway holds no blob store. It authorizes each files
// call (roles, the account library's rules), confines its path
// (manifest.Clean, before the mux could clean it) and streams the bytes
// both ways, serving every file so that nothing uploaded runs in its
// origin; the local store's presigned URLs go through its /v1/blobs/,
// proxied unchanged.
//
// Browsers and API clients reach the gateway over HTTPS (Config.TLS); plain
// HTTP is served on loopback only. The gateway registers the addresses it
// is reached at with the scheduler (Registrar), so that node agents deny
// them to sandboxes.
//
// Nothing is unbounded (docs/GATEWAY.md, "Limits"): every list is read and
// answered a page at a time, an ended step's view is kept in its run
// record so that lists never read ended steps again, runs are admitted
// under quotas per workspace and per principal, sign-in is bounded before
// anything is recorded, and a maintenance pass that every gateway runs
// (Maintain) deletes run records past retention and expired sign-ins.
//
// Provider identifiers (node names and addresses, container ids, runtime
// names) never leave the gateway: step objects are rebuilt without them and
// free text is scrubbed (Scrub).
package gateway
