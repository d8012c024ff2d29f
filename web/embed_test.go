package web

import (
	"io/fs"
	"os"
	"regexp"
	"strings"
	"testing"
)

// requireBuilt skips when the page was not built, except under CI, where
// scripts/test runs web/build first and a missing page is a failure.
func requireBuilt(t *testing.T) {
	t.Helper()
	if Built() {
		return
	}
	if ci := os.Getenv("CI"); ci != "" && ci != "false" && ci != "0" {
		t.Fatal("web/dist holds no index.html: run web/build before go test")
	}
	t.Skip("web/dist not built (run web/build); skipped outside CI")
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := fs.ReadFile(FS(), name)
	if err != nil {
		t.Fatalf("ReadFile(%q): %v", name, err)
	}
	return string(b)
}

var refAttr = regexp.MustCompile(`(?i)\b(?:src|href)\s*=\s*"([^"]*)"`)

func TestIndexReferencesBundle(t *testing.T) {
	requireBuilt(t)
	index := readFile(t, "index.html")
	refs := map[string]bool{}
	for _, m := range refAttr.FindAllStringSubmatch(index, -1) {
		ref := m[1]
		if strings.HasPrefix(ref, "#") {
			continue
		}
		name := strings.TrimPrefix(strings.TrimPrefix(ref, "./"), "/")
		if strings.Contains(ref, ":") || strings.HasPrefix(ref, "//") {
			t.Errorf("index.html refers to %q, want a file served by the gateway", ref)
			continue
		}
		if _, err := fs.Stat(FS(), name); err != nil {
			t.Errorf("index.html refers to %q: %v", ref, err)
		}
		refs[name] = true
	}
	for _, want := range []string{"app.js", "app.css"} {
		if !refs[want] {
			t.Errorf("index.html does not refer to %s", want)
		}
	}
}

func TestNoExternalResources(t *testing.T) {
	requireBuilt(t)
	index := readFile(t, "index.html")
	for _, bad := range []string{"http://", "https://"} {
		if strings.Contains(index, bad) {
			t.Errorf("index.html contains %q; everything must come from the gateway", bad)
		}
	}
	// The bundle keeps URLs in xterm's comments and strings (links it
	// detects, namespaces): look for what would load something instead.
	for _, name := range []string{"app.js", "app.css"} {
		text := readFile(t, name)
		for _, bad := range []string{"https://cdn", "http://cdn", "fonts.googleapis", "fonts.gstatic", "unpkg.com", "jsdelivr", "@import url(", "url(http", "url(\"http", "url('http", "url(//"} {
			if strings.Contains(text, bad) {
				t.Errorf("%s contains %q; everything must come from the gateway", name, bad)
			}
		}
	}
}

// TestStrictCSP checks what "default-src 'self'" forbids in the page
// itself: inline scripts, inline handlers and style attributes.
func TestStrictCSP(t *testing.T) {
	requireBuilt(t)
	index := readFile(t, "index.html")
	for _, m := range regexp.MustCompile(`(?is)<script\b([^>]*)>(.*?)</script>`).FindAllStringSubmatch(index, -1) {
		if !strings.Contains(m[1], "src=") || strings.TrimSpace(m[2]) != "" {
			t.Errorf("index.html has an inline script %q", m[0])
		}
	}
	if m := regexp.MustCompile(`(?i)<[^>]*\s(on[a-z]+|style)\s*=`).FindString(index); m != "" {
		t.Errorf("index.html has an inline handler or style attribute: %q", m)
	}
	if regexp.MustCompile(`(?i)<style\b`).MatchString(index) {
		t.Error("index.html has a <style> element")
	}
	js := readFile(t, "app.js")
	for _, bad := range []string{"eval(", "new Function("} {
		if strings.Contains(js, bad) {
			t.Errorf("app.js contains %q, which the CSP forbids", bad)
		}
	}
}

func TestBuiltFalseMeansNoPage(t *testing.T) {
	_, err := fs.Stat(FS(), "index.html")
	if got, want := err == nil, Built(); got != want {
		t.Errorf("index.html in FS() = %v, Built() = %v; want them equal", got, want)
	}
}
