package cli

import (
	"fmt"
	"strings"
)

// EnvFlag collects repeated --env K=V flags (flag.Var).
type EnvFlag []string

func (e *EnvFlag) String() string { return strings.Join(*e, ",") }

// Set adds v, which must be K=V with K not empty.
func (e *EnvFlag) Set(v string) error {
	k, _, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q: want K=V", v)
	}
	*e = append(*e, v)
	return nil
}
