package gateway

import (
	"context"
	"errors"
	"fmt"
)

// errNoSecret is secretValues' error for a name without a secret.
var errNoSecret = errors.New("no secret of that name in the account")

// secretValues opens the values of the named secrets of ctx's tenant, for
// the delivery of a step's secrets to its node (and nothing else). A name
// without a secret is an error naming it (errNoSecret); so is a root key
// file that is missing or does not open the account's data key.
func (g *Gateway) secretValues(ctx context.Context, names []string) (map[string]string, error) {
	if len(names) == 0 {
		return map[string]string{}, nil
	}
	k, err := g.dataKey(ctx, false)
	if errors.Is(err, errNoDataKey) {
		return nil, fmt.Errorf("%w: %s", errNoSecret, names[0])
	}
	if err != nil {
		return nil, err
	}
	tenant := tenantFrom(ctx)
	out := make(map[string]string, len(names))
	for _, name := range names {
		var rec secretRecord
		_, err := getRecord(ctx, g.store, kindSecret, name, &rec)
		if IsNotFound(err) {
			return nil, fmt.Errorf("%w: %s", errNoSecret, name)
		}
		if err != nil {
			return nil, fmt.Errorf("read secret %s: %w", name, err)
		}
		v, err := k.Open(tenant, name, rec.Version, rec.Sealed)
		if err != nil {
			return nil, err
		}
		out[name] = v
	}
	return out, nil
}
