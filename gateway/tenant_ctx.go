package gateway

import "context"

// tenantKey is the context key of the tenant a call acts in.
type tenantKey struct{}

// withTenant returns ctx acting in tenant id: every record the gateway's
// store reads or writes through it is that tenant's (tenant.go).
func withTenant(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, tenantKey{}, id)
}

// tenantFrom returns the tenant ctx acts in, "" for none.
func tenantFrom(ctx context.Context) string {
	id, _ := ctx.Value(tenantKey{}).(string)
	return id
}
