// Package size is Rodon's one grammar of byte sizes: every flag of
// schedctl and agentd that takes a SIZE and every size field of the
// gateway's API (memory, workspace_size, output_cap) is read by Parse.
//
// A size is a non-negative decimal number (digits, optionally with a
// fraction: "1.5") and at most one unit, written right after it;
// surrounding white space is ignored and the result is rounded down to
// whole bytes. The units follow Kubernetes' quantities, except that the
// plain lower-case letters the CLIs always took stay binary:
//
//	unit                      meaning                          example
//	(none), B, b              bytes                            2048
//	k, m, g, t, p             2^10, 2^20, 2^30, 2^40, 2^50     512m = 512 MiB
//	kb, mb, gb, tb, pb        the same                         64mb
//	kib, mib, gib, tib, pib   the same                         1gib
//	Ki, Mi, Gi, Ti, Pi        the same (Kubernetes)            512Mi
//	KiB, MiB, GiB, TiB, PiB   the same (what Format writes)    1.5GiB
//	K, M, G, T, P             10^3, 10^6, 10^9, 10^12, 10^15   1G = 1,000,000,000
//	KB, MB, GB, TB, PB        the same (SI)                    2GB
//
// In one sentence: a lower-case unit or one with an i is binary, an
// upper-case unit without an i is decimal. Unlike Kubernetes, "m" is
// mebibytes, not thousandths. Anything else (other capitalisations such
// as "Mb" or "MIB", exponents, signs, hexadecimal, a space before the
// unit) is refused, and so is a size above 2^62 bytes (4 EiB). The table
// is repeated in docs/PROTOCOL.md ("Sizes").
package size

import (
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"
)

// Max is the largest size Parse accepts: 2^62 bytes.
const Max = 1 << 62

// units maps each accepted unit to its multiplier.
var units = func() map[string]int64 {
	m := map[string]int64{"": 1, "B": 1, "b": 1}
	for i, p := range []string{"k", "m", "g", "t", "p"} {
		bin, dec := int64(1)<<(10*(i+1)), int64(1)
		for range i + 1 {
			dec *= 1000
		}
		up := strings.ToUpper(p)
		for _, u := range []string{p, p + "b", up + "i", up + "iB", p + "ib"} {
			m[u] = bin
		}
		m[up], m[up+"B"] = dec, dec
	}
	return m
}()

var sizePattern = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)([A-Za-z]*)$`)

// Forms names the accepted forms for error messages and flag help.
const Forms = "a number with an optional unit: k, m, g, t or Ki, Mi, Gi, Ti (powers of 1024), K, M, G, T (powers of 1000), such as 512m, 512Mi or 1G"

// Error is Parse's error: the input and why it is not a size.
type Error struct {
	Input  string
	TooBig bool
}

func (e *Error) Error() string {
	if e.TooBig {
		return fmt.Sprintf("size %q: too large: at most 4EiB", e.Input)
	}
	return fmt.Sprintf("size %q: want %s", e.Input, Forms)
}

// Parse returns the number of bytes s names (see the package doc); its
// error is an *Error.
func Parse(s string) (int64, error) {
	m := sizePattern.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, &Error{Input: s}
	}
	mult, ok := units[m[2]]
	if !ok {
		return 0, &Error{Input: s}
	}
	if len(m[1]) > 40 {
		return 0, &Error{Input: s, TooBig: true}
	}
	v, ok := new(big.Rat).SetString(m[1])
	if !ok {
		return 0, &Error{Input: s}
	}
	v.Mul(v, new(big.Rat).SetInt64(mult))
	n := new(big.Int).Quo(v.Num(), v.Denom())
	if n.Cmp(big.NewInt(Max)) > 0 {
		return 0, &Error{Input: s, TooBig: true}
	}
	return n.Int64(), nil
}

// Format writes n bytes for people in the units Parse reads back: "512B",
// "980KiB", "1GiB", "3.5GiB" (one decimal at most, so that Parse of the
// result may differ from n by up to 5% of a unit).
func Format(n int64) string {
	names := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	v, i := float64(n), 0
	for math.Abs(v) >= 1024 && i < len(names)-1 {
		v /= 1024
		i++
	}
	return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64) + names[i]
}

// Flag is a byte size as a flag.Value: Set parses as Parse does, String
// formats as Format does.
type Flag int64

func (f *Flag) String() string { return Format(int64(*f)) }

func (f *Flag) Set(v string) error {
	n, err := Parse(v)
	if err != nil {
		return err
	}
	*f = Flag(n)
	return nil
}
