package gateway

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"
)

type signinRequest struct {
	Email    string `json:"email"`
	Password string `json:"password"`
}

type signinResponse struct {
	Account   Account `json:"account"`
	CSRFToken string  `json:"csrf_token"`
}

// errWrongPassword is the one answer to a failed sign-in, whether the
// email is unknown or the password wrong.
var errWrongPassword = unauthorized("email or password is wrong")

func (g *Gateway) handleSignin(c *call) error {
	var req signinRequest
	if err := c.decode(&req); err != nil {
		return err
	}
	email := normalizeEmail(req.Email)
	c.target = email
	c.auditCred = &credentialRef{Kind: "password"}
	if email == "" || req.Password == "" {
		return badRequest("email and password are required")
	}
	if len(email) > 254 || len(req.Password) > 1024 {
		return badRequest("email or password too long")
	}
	if err := g.signinAllowed(c.r, email); err != nil {
		g.metrics.signins.WithLabelValues("rate_limited").Inc()
		return err
	}
	var a accountRecord
	_, err := getRecord(c.ctx, g.store, kindAccount, accountID(email), &a)
	if IsNotFound(err) {
		checkPassword(dummyHash(), req.Password) // as slow as a real check
		g.metrics.signins.WithLabelValues("wrong").Inc()
		return errWrongPassword
	}
	if err != nil {
		return err
	}
	c.auditWho, c.auditRole = a.ID, a.Role.String()
	if !checkPassword(a.PasswordHash, req.Password) {
		g.metrics.signins.WithLabelValues("wrong").Inc()
		return errWrongPassword
	}
	tokb := make([]byte, 32)
	rand.Read(tokb)
	tok := base64.RawURLEncoding.EncodeToString(tokb)
	now := g.now()
	s := signinRecord{Account: a.ID, CreatedAt: now, ExpiresAt: now.Add(g.cfg.SessionTTL)}
	sid := digest(tok)
	if _, err := putRecord(c.ctx, g.store, kindSignin, sid, 0, &s); err != nil {
		return err
	}
	c.auditCred = &credentialRef{Kind: "session", ID: sessionRef(sid)}
	g.metrics.signins.WithLabelValues("ok").Inc()
	http.SetCookie(c.w, &http.Cookie{
		Name: cookieName, Value: tok, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: g.secureCookie, Expires: s.ExpiresAt, MaxAge: int(g.cfg.SessionTTL / time.Second),
	})
	return c.json(http.StatusOK, signinResponse{Account: a.public(), CSRFToken: csrfToken(tok)})
}

// signinAllowed takes a token from the email's and the client's buckets.
func (g *Gateway) signinAllowed(r *http.Request, email string) error {
	okE, waitE := g.signinByEmail.take(email)
	okA, waitA := g.signinByAddr.take(clientAddr(r).String())
	if okE && okA {
		return nil
	}
	wait := max(waitE, waitA)
	return &httpError{status: http.StatusTooManyRequests, code: codeRateLimited,
		msg:        fmt.Sprintf("too many sign-in attempts: retry in %s", wait.Round(time.Second)),
		retryAfter: int(math.Ceil(wait.Seconds()))}
}

func (g *Gateway) handleSignout(c *call) error {
	ck, err := c.r.Cookie(cookieName)
	if err != nil || c.p.key != nil {
		return badRequest("sign out needs the %s cookie", cookieName)
	}
	sid := digest(ck.Value)
	c.target = c.p.cred.ID
	rec, err := g.store.GetRecord(c.ctx, kindSignin, sid)
	if err == nil {
		err = g.store.DeleteRecord(c.ctx, kindSignin, sid, rec.Version)
	}
	if err != nil && !IsNotFound(err) {
		return err
	}
	http.SetCookie(c.w, &http.Cookie{Name: cookieName, Value: "", Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: g.secureCookie, MaxAge: -1})
	c.w.WriteHeader(http.StatusNoContent)
	return nil
}

// meResponse is the answer of GET /v1/me.
type meResponse struct {
	Account    *Account `json:"account,omitempty"`
	Key        *Key     `json:"key,omitempty"`
	Role       Role     `json:"role"`
	Workspaces []string `json:"workspaces"`
	CSRFToken  string   `json:"csrf_token,omitempty"`
}

func (g *Gateway) handleMe(c *call) error {
	out := meResponse{Role: c.p.Role, Workspaces: orEmpty(c.p.Workspaces), CSRFToken: c.p.csrf}
	if c.p.account != nil {
		a := c.p.account.public()
		out.Account = &a
	}
	if c.p.key != nil {
		k := c.p.key.public()
		out.Key = &k
	}
	return c.json(http.StatusOK, out)
}

func (a *accountRecord) public() Account {
	return Account{ID: a.ID, Email: a.Email, Role: a.Role, Workspaces: orEmpty(a.Workspaces), CreatedAt: a.CreatedAt}
}

func (k *keyRecord) public() Key {
	return Key{ID: k.ID, Name: k.Name, Role: k.Role, Workspaces: orEmpty(k.Workspaces), CreatedAt: k.CreatedAt, LastUsedAt: k.LastUsedAt}
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// checkEmail checks the form of an email address (not that it exists).
func checkEmail(email string) error {
	e := normalizeEmail(email)
	at := strings.LastIndexByte(e, '@')
	if at < 1 || at == len(e)-1 || len(e) > 254 || strings.ContainsAny(e, " \t\r\n\"<>,;") {
		return fmt.Errorf("email %q: want an address such as ada@example.com", email)
	}
	return nil
}
