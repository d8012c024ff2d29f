package gateway

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The canonical id prefixes of the gateway's objects.
const (
	prefixAccount = "acct-"
	// prefixTenant starts a tenant's id (api.Tenant: the API calls
	// tenants accounts); a member's is accountID's, longer.
	prefixTenant    = "acct-"
	prefixKey       = "key-"
	prefixWorkspace = "ws-"
	prefixSession   = "sess-"
	prefixRun       = "run-"
	prefixStep      = "s-"
)

// idLen is the length of the random (or derived) part of an id.
const idLen = 12

// lowerBase32 encodes without padding in the scheduler's id alphabet.
var lowerBase32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// newID returns prefix followed by idLen random characters.
func newID(prefix string) string {
	return prefix + randomString(idLen)
}

// sortable is an alphabet of a-z0-9 in byte order (base32hex, lower
// case): ids built with it sort as the numbers they encode.
const sortable = "0123456789abcdefghijklmnopqrstuv"

// timeIDLen is the length of the time part of newTimeID's ids: 50 bits of
// milliseconds.
const timeIDLen = 10

// newTimeID returns prefix, then t counted backwards (newer ids sort
// first), then idLen random characters: the record store lists such ids
// newest first, so that a list's first page is the latest.
func newTimeID(prefix string, t time.Time) string {
	return prefix + invertedTime(t) + randomString(idLen)
}

// invertedTime encodes 2^50-1 minus t's milliseconds (newer sorts
// first); forwardTime encodes t's milliseconds (older sorts first).
func invertedTime(t time.Time) string { return encodeSortable(1<<50 - 1 - millis(t)) }
func forwardTime(t time.Time) string  { return encodeSortable(millis(t)) }

func millis(t time.Time) uint64 { return uint64(max(t.UnixMilli(), 0)) & (1<<50 - 1) }

// encodeSortable encodes the low 50 bits of v in timeIDLen characters of
// sortable.
func encodeSortable(v uint64) string {
	b := make([]byte, timeIDLen)
	for i := timeIDLen - 1; i >= 0; i-- {
		b[i] = sortable[v&31]
		v >>= 5
	}
	return string(b)
}

// newGeneration returns a fresh account generation.
func newGeneration() string { return randomString(idLen) }

// randomString returns n random characters of a-z2-7.
func randomString(n int) string {
	b := make([]byte, (n*5+7)/8)
	rand.Read(b)
	return lowerBase32.EncodeToString(b)[:n]
}

// accountID is the id of the account of email: derived from the address,
// so that creating an account is one compare-and-set and signing in one
// read.
func accountID(email string) string {
	sum := sha256.Sum256([]byte(normalizeEmail(email)))
	return prefixAccount + lowerBase32.EncodeToString(sum[:])[:16]
}

func normalizeEmail(email string) string { return strings.ToLower(strings.TrimSpace(email)) }

// validID reports whether id is prefix followed by 1-32 of a-z0-9.
func validID(id, prefix string) bool {
	rest, ok := strings.CutPrefix(id, prefix)
	if !ok || len(rest) == 0 || len(rest) > 32 {
		return false
	}
	for _, c := range []byte(rest) {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// stepID is the scheduler id of step index of run: "s-" + the run's
// random part + "-" + index, so that the same step always has the same id
// and a second submission is a harmless conflict. It fits the scheduler's
// rule (1-63 of a-z0-9-_).
func stepID(runID string, index int) string {
	return prefixStep + strings.TrimPrefix(runID, prefixRun) + "-" + strconv.Itoa(index)
}

// parseStepID returns the run and index of a step id made by stepID.
func parseStepID(id string) (runID string, index int, err error) {
	rest, ok := strings.CutPrefix(id, prefixStep)
	part, idx, ok2 := strings.Cut(rest, "-")
	if !ok || !ok2 || !validID(prefixRun+part, prefixRun) {
		return "", 0, fmt.Errorf("step id %q: want s-<run>-<index> such as s-%s-0", id, strings.Repeat("a", idLen))
	}
	n, err := strconv.Atoi(idx)
	if err != nil || n < 0 || n >= maxToolSteps || strconv.Itoa(n) != idx {
		return "", 0, fmt.Errorf("step id %q: index %q is not a step index", id, idx)
	}
	return prefixRun + part, n, nil
}
