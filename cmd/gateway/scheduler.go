package main

import (
	"fmt"

	"github.com/rodon-compute/rodon/gateway"
	"github.com/rodon-compute/rodon/scheduler/client"
)

// newScheduler returns the scheduler client as the gateway's record store
// and step API.
func newScheduler(addrs string) (gateway.Store, gateway.Steps, *client.Client, error) {
	c, err := client.New(addrs, client.Options{UserAgent: "rodon-gateway"})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: --scheduler: %v", errUsage, err)
	}
	return c, c, c, nil
}
