package gateway

import "context"

// A Reloader re-reads one set of certificate files: the cluster
// certificate (pki.Source.Reload) or the public one (PublicCert.Reload).
type Reloader struct {
	// What names the files in the log: "the cluster certificate",
	// "--https-cert".
	What string
	// Reload re-reads them; on an error the previous ones stay.
	Reload func() error
}

// reloadLoop calls every Reloader at each value of cfg.Reload until ctx
// ends (the files are also re-read when they change). A failed reload is
// logged and keeps the previous certificate.
func (g *Gateway) reloadLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.cfg.Reload:
		}
		for _, r := range g.cfg.Reloaders {
			if err := r.Reload(); err != nil {
				g.log.Error("reload "+r.What+" on SIGHUP; keeping the previous one", "error", err)
			}
		}
	}
}
