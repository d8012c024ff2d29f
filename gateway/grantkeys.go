package gateway

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/rodon-compute/rodon/gateway/agentfile"
)

// The grants of grant.go as go-jose compact JWS (docs/design/agents.md,
// "Grants"): EdDSA over Ed25519, the token "rg_" + the JWS.
const (
	grantIssuer   = "rodon-gateway"
	grantAudience = "rodon-run"
	// grantKeyEvery is how long a gateway signs grants with one key: the
	// first grant after that makes the next key.
	grantKeyEvery = 24 * time.Hour
	// grantKeyRecheck is how long a key is trusted from the cache before
	// its record is read again: a deleted key record stops verifying on
	// every gateway within it.
	grantKeyRecheck = time.Minute
	// grantSkew is how far ahead of this gateway's clock another
	// gateway's may be for a grant it just issued (nbf, iat). Expiry
	// takes no leeway.
	grantSkew = 5 * time.Second
	// maxGrantBytes bounds a token before it is parsed.
	maxGrantBytes = 16 << 10
	// prefixGrantKey starts a grant key's id (its kid).
	prefixGrantKey = "gk-"
)

// grantKeyRecord is a gateway's public grant key (kind grant_key, id its
// kid). It is written before the key signs its first grant and lives
// until the last grant the key may have signed expired (Expires), when
// the maintenance pass deletes it. The private half is never stored.
type grantKeyRecord struct {
	// Key is the public key as a JWK (kty OKP, crv Ed25519, kid, alg
	// EdDSA).
	Key       json.RawMessage `json:"key"`
	Gateway   string          `json:"gateway,omitempty"` // the gateway's name
	CreatedAt time.Time       `json:"created_at"`
	Expires   time.Time       `json:"expires"`
}

// jwsGrants is the grants implementation: it signs with an Ed25519 key
// made in memory (at the first grant, then every grantKeyEvery) and
// verifies with the public keys of every gateway's records, cached by kid.
type jwsGrants struct {
	store Store
	now   func() time.Time
	name  string

	// mu guards signing; held while a new key is published, so that
	// every grant is signed by a key whose record exists.
	mu      sync.Mutex
	signing *signingKey

	// cacheMu guards cache: public keys by kid.
	cacheMu sync.Mutex
	cache   map[string]cachedGrantKey
}

// signingKey is the key grants are signed with now.
type signingKey struct {
	kid    string
	signer jose.Signer
	// rotate is when the next key replaces it; expires its record's
	// Expires (rotate + agentfile.MaxRun).
	rotate, expires time.Time
	// checked is when its record was last seen: a key whose record was
	// deleted (revoked) signs nothing more.
	checked time.Time
}

// cachedGrantKey is a verified key record: its public key, its expiry and
// when its record was last read.
type cachedGrantKey struct {
	pub              ed25519.PublicKey
	expires, checked time.Time
}

func newJWSGrants(store Store, now func() time.Time, name string) *jwsGrants {
	return &jwsGrants{store: store, now: now, name: name, cache: map[string]cachedGrantKey{}}
}

// issue signs c. IssuedAt (zero: now) and Expires are cut to whole
// seconds, as JWT times are: a caller recording them should cut them too.
// Expires must be in the future and at most agentfile.MaxRun away.
func (k *jwsGrants) issue(ctx context.Context, c grantClaims) (string, error) {
	now := k.now()
	if c.ID == "" || c.Run == "" {
		return "", errors.New("issue grant: id and run are required")
	}
	iat := c.IssuedAt
	if iat.IsZero() {
		iat = now
	}
	iat, exp := iat.Truncate(time.Second), c.Expires.Truncate(time.Second)
	if !exp.After(now) || exp.After(now.Add(agentfile.MaxRun)) {
		return "", fmt.Errorf("issue grant %s: expiry %v: want after now and at most %v away", c.ID, c.Expires, agentfile.MaxRun)
	}
	sk, err := k.current(ctx, now)
	if err != nil {
		return "", fmt.Errorf("issue grant %s: %w", c.ID, err)
	}
	reg := jwt.Claims{
		Issuer:    grantIssuer,
		Subject:   c.Run,
		Audience:  jwt.Audience{grantAudience},
		ID:        c.ID,
		IssuedAt:  jwt.NewNumericDate(iat),
		NotBefore: jwt.NewNumericDate(iat),
		Expiry:    jwt.NewNumericDate(exp),
	}
	s, err := jwt.Signed(sk.signer).Claims(c).Claims(reg).Serialize()
	if err != nil {
		return "", fmt.Errorf("sign grant %s: %w", c.ID, err)
	}
	return grantPrefix + s, nil
}

// current returns the signing key, making and publishing a new one when
// there is none yet, the last is due for rotation, or its record was
// deleted (seen within grantKeyRecheck).
func (k *jwsGrants) current(ctx context.Context, now time.Time) (*signingKey, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if sk := k.signing; sk != nil && now.Before(sk.rotate) {
		if now.Sub(sk.checked) < grantKeyRecheck {
			return sk, nil
		}
		_, err := k.store.GetRecord(ctx, kindGrantKey, sk.kid)
		switch {
		case err == nil:
			sk.checked = now
			return sk, nil
		case !IsNotFound(err):
			return nil, fmt.Errorf("read grant key %s: %w", sk.kid, err)
		}
		// Revoked: its grants verify no more here either; make the next
		// key now.
		k.forget(sk.kid)
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("make grant key: %w", err)
	}
	kid := newID(prefixGrantKey)
	rotate := now.Add(grantKeyEvery)
	expires := rotate.Add(agentfile.MaxRun)
	jwk, err := jose.JSONWebKey{Key: pub, KeyID: kid, Algorithm: string(jose.EdDSA), Use: "sig"}.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("encode grant key %s: %w", kid, err)
	}
	rec := grantKeyRecord{Key: jwk, Gateway: k.name, CreatedAt: now, Expires: expires}
	if _, err := putRecord(ctx, k.store, kindGrantKey, kid, 0, &rec); err != nil {
		return nil, fmt.Errorf("publish grant key %s: %w", kid, err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: priv},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader(jose.HeaderKey("kid"), kid))
	if err != nil {
		return nil, fmt.Errorf("make grant signer: %w", err)
	}
	k.signing = &signingKey{kid: kid, signer: signer, rotate: rotate, expires: expires, checked: now}
	k.remember(kid, cachedGrantKey{pub: pub, expires: expires, checked: now})
	return k.signing, nil
}

// badGrant is errBadGrant with why, for logs.
func badGrant(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), errBadGrant)
}

// verify checks tok and returns its claims (ID, IssuedAt and Expires
// from the registered claims). Anything wrong with the token is
// errBadGrant wrapped; another error is the store's.
func (k *jwsGrants) verify(ctx context.Context, tok string) (*grantClaims, error) {
	s, ok := strings.CutPrefix(tok, grantPrefix)
	if !ok || len(s) > maxGrantBytes {
		return nil, badGrant("not an rg_ token of at most %d bytes", maxGrantBytes)
	}
	t, err := jwt.ParseSigned(s, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		return nil, badGrant("parse: %v", err)
	}
	if len(t.Headers) != 1 || t.Headers[0].Algorithm != string(jose.EdDSA) || t.Headers[0].KeyID == "" {
		return nil, badGrant("want one EdDSA signature with a kid")
	}
	now := k.now()
	pub, err := k.publicKey(ctx, t.Headers[0].KeyID, now)
	if err != nil {
		return nil, err
	}
	var reg jwt.Claims
	var c grantClaims
	if err := t.Claims(pub, &reg, &c); err != nil {
		return nil, badGrant("signature: %v", err)
	}
	if reg.Expiry == nil || reg.NotBefore == nil || reg.IssuedAt == nil || reg.ID == "" || reg.Subject == "" || reg.Subject != c.Run {
		return nil, badGrant("want exp, nbf, iat, jti and sub = run")
	}
	if err := reg.ValidateWithLeeway(jwt.Expected{Issuer: grantIssuer, AnyAudience: jwt.Audience{grantAudience}, Time: now}, grantSkew); err != nil {
		return nil, badGrant("grant %s: %v", reg.ID, err)
	}
	if !now.Before(reg.Expiry.Time()) {
		return nil, badGrant("grant %s: expired at %v", reg.ID, reg.Expiry.Time())
	}
	c.ID, c.IssuedAt, c.Expires = reg.ID, reg.IssuedAt.Time().UTC(), reg.Expiry.Time().UTC()
	return &c, nil
}

// publicKey returns the public key of kid: from the cache while it was
// read less than grantKeyRecheck ago (or while the store does not answer),
// else from its record.
func (k *jwsGrants) publicKey(ctx context.Context, kid string, now time.Time) (ed25519.PublicKey, error) {
	if !validID(kid, prefixGrantKey) {
		return nil, badGrant("kid %.40q: not a grant key id", kid)
	}
	k.cacheMu.Lock()
	ck, cached := k.cache[kid]
	k.cacheMu.Unlock()
	if cached && !now.Before(ck.expires) {
		return nil, badGrant("grant key %s expired at %v", kid, ck.expires)
	}
	if cached && now.Sub(ck.checked) < grantKeyRecheck {
		return ck.pub, nil
	}
	var rec grantKeyRecord
	_, err := getRecord(ctx, k.store, kindGrantKey, kid, &rec)
	switch {
	case IsNotFound(err):
		k.forget(kid)
		return nil, badGrant("grant key %s: no such key", kid)
	case err != nil && cached:
		return ck.pub, nil // the store is away: the key was good a moment ago
	case err != nil:
		return nil, fmt.Errorf("read grant key %s: %w", kid, err)
	}
	if !now.Before(rec.Expires) {
		return nil, badGrant("grant key %s expired at %v", kid, rec.Expires)
	}
	var jwk jose.JSONWebKey
	if err := jwk.UnmarshalJSON(rec.Key); err != nil {
		return nil, badGrant("grant key %s: %v", kid, err)
	}
	pub, ok := jwk.Key.(ed25519.PublicKey)
	if !ok || jwk.KeyID != kid || !jwk.IsPublic() {
		return nil, badGrant("grant key %s: not an Ed25519 public key of that kid", kid)
	}
	k.remember(kid, cachedGrantKey{pub: pub, expires: rec.Expires, checked: now})
	return pub, nil
}

// remember caches a key, dropping the expired ones.
func (k *jwsGrants) remember(kid string, ck cachedGrantKey) {
	k.cacheMu.Lock()
	defer k.cacheMu.Unlock()
	for id, c := range k.cache {
		if !ck.checked.Before(c.expires) {
			delete(k.cache, id)
		}
	}
	k.cache[kid] = ck
}

func (k *jwsGrants) forget(kid string) {
	k.cacheMu.Lock()
	defer k.cacheMu.Unlock()
	delete(k.cache, kid)
}
