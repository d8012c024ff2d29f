// Package secretmask hides a step's secret values in its output before the
// output is logged or streamed: a step that prints a secret shows ***.
//
// New takes the values; for each non-empty value V the Masker looks for
// seven forms (fewer where two coincide): V itself, the standard base64 of
// V padded and unpadded in the standard and the URL alphabets, and the hex
// of V in lower and in upper case. Masker.Writer wraps the stream that
// receives the output.
//
// Every byte covered by an occurrence of any form is hidden. Occurrences
// that overlap or touch become one run, and each run is written as a
// single *** (so "secretsecret" is "***"). Where two matches overlap the
// longest is therefore always hidden whole, and no byte of either shows.
// The output holds no form of a value without '*': such a form could only
// lie within bytes that were not masked, and no form occurs there.
//
// A value is matched only as written: the masker does not find V inside a
// longer base64 text unless V starts on a 3-byte boundary of what was
// encoded, nor hex in mixed case, nor V quoted, escaped or split by other
// bytes. A value that holds '*' may show through next to a mask (the value
// "**" is part of every ***).
//
// Short values. A value shorter than 4 bytes is masked like any other,
// because leaving it out would print it. The cost is that every
// occurrence of those bytes is hidden, secret or not (a one-byte value
// "a" hides every "a" of the output), and a reader may still guess the
// value from where masks appear. Give steps secrets long enough to be
// unlikely in ordinary output.
//
// Streaming. A form may be split across Write calls, so the writer holds
// back at most the length of the longest form minus one bytes and writes
// everything before them, masked, to the underlying writer at once. Close
// writes the held tail. At the end of the stream a held tail that is only
// the beginning of a form is written as is: it is not the secret, and the
// stream has ended before it could become one. Memory is bounded by the
// longest form plus a fixed chunk, whatever the size of a Write; the
// writer starts no goroutine.
//
// A Masker is immutable and safe for concurrent use; each stream gets its
// own writer, which is not safe for concurrent use.
package secretmask

import (
	"encoding/base64"
	"encoding/hex"
	"strings"
)

// Mask is what replaces each run of masked bytes.
const Mask = "***"

// Masker finds the forms of a set of secret values. Build it with New.
// A nil *Masker masks nothing.
type Masker struct {
	// single marks the forms that are one byte long.
	single [256]bool
	// pairs is a set of the pairs of bytes a form may start with, one bit
	// for each of the 65536 pairs: the first two bytes of each longer
	// form and every pair starting with a one-byte form. byPair lists the
	// longer forms by their first two bytes.
	pairs  [1 << 16 / 64]uint64
	byPair map[uint16][][]byte
	// longest is the length of the longest form, 0 without forms.
	longest int
}

// New returns a Masker for values. Empty values are ignored; New with no
// non-empty value returns a Masker whose writers pass their input
// through unchanged. New keeps copies of the values' forms, never values
// itself.
func New(values []string) *Masker {
	m := &Masker{byPair: make(map[uint16][][]byte)}
	seen := make(map[string]bool)
	for _, v := range values {
		if v == "" {
			continue
		}
		for _, f := range forms(v) {
			if seen[f] {
				continue
			}
			seen[f] = true
			m.longest = max(m.longest, len(f))
			if len(f) == 1 {
				m.single[f[0]] = true
				for b := range 256 {
					p := pair(f[0], byte(b))
					m.pairs[p/64] |= 1 << (p % 64)
				}
				continue
			}
			p := pair(f[0], f[1])
			m.pairs[p/64] |= 1 << (p % 64)
			m.byPair[p] = append(m.byPair[p], []byte(f))
		}
	}
	return m
}

// pair is the index of the two bytes a, b in Masker.pairs.
func pair(a, b byte) uint16 { return uint16(a)<<8 | uint16(b) }

// forms returns the encodings of v that are masked, duplicates included.
func forms(v string) []string {
	b := []byte(v)
	lower := hex.EncodeToString(b)
	return []string{
		v,
		base64.StdEncoding.EncodeToString(b),
		base64.RawStdEncoding.EncodeToString(b),
		base64.URLEncoding.EncodeToString(b),
		base64.RawURLEncoding.EncodeToString(b),
		lower,
		strings.ToUpper(lower),
	}
}
