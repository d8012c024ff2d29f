// Package gatewaytest holds test doubles of the scheduler for package
// gateway: MemStore, an in-memory record store and audit log with the
// scheduler's compare-and-set rules, and Scheduler, an in-memory step API
// whose steps a test moves through their lifecycle by hand. Both answer
// errors as the scheduler client does (*client.Error with the api codes).
package gatewaytest
