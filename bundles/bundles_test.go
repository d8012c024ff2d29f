package bundles

import "testing"

func TestRef(t *testing.T) {
	for _, tc := range []struct {
		name, want string
	}{
		{"base", Base},
		{"python", Python},
		{"other", "rodon.local/other:latest"},
		{Base, Base},
		{"docker.io/library/alpine:3.20", "docker.io/library/alpine:3.20"},
		{"alpine:3.20", "alpine:3.20"},
		{"ghcr.io/x/y", "ghcr.io/x/y"},
	} {
		if got := Ref(tc.name); got != tc.want {
			t.Errorf("Ref(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}
