package gateway

import (
	"math"
	"sync"
	"time"
)

// limiter is a set of token buckets keyed by string (an email, a client
// address). Each holds up to burst tokens and regains one every per. It is
// safe for concurrent use.
type limiter struct {
	burst float64
	per   time.Duration
	now   func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

// maxBuckets bounds the memory of a limiter: past it, full buckets are
// dropped (a full bucket is the same as none), and if that is not enough,
// any (a client whose bucket is dropped gets a full one again: the global
// cap on password checks still holds).
const maxBuckets = 10000

func newLimiter(burst int, per time.Duration, now func() time.Time) *limiter {
	return &limiter{burst: float64(burst), per: per, now: now, buckets: map[string]*bucket{}}
}

// take takes a token from key's bucket. When it is empty it returns false
// and how long until the next token.
func (l *limiter) take(key string) (ok bool, wait time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b, found := l.buckets[key]
	if !found {
		if len(l.buckets) >= maxBuckets {
			l.prune(now)
		}
		for k := range l.buckets {
			if len(l.buckets) < maxBuckets {
				break
			}
			delete(l.buckets, k)
		}
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[key] = b
	}
	b.tokens = math.Min(l.burst, b.tokens+float64(now.Sub(b.last))/float64(l.per))
	b.last = now
	if b.tokens < 1 {
		return false, time.Duration((1 - b.tokens) * float64(l.per))
	}
	b.tokens--
	return true, 0
}

func (l *limiter) prune(now time.Time) {
	for k, b := range l.buckets {
		if b.tokens+float64(now.Sub(b.last))/float64(l.per) >= l.burst {
			delete(l.buckets, k)
		}
	}
}
