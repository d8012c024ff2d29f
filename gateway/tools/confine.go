package tools

import (
	"fmt"
	"net/url"
	"path"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/rodon-compute/rodon/api"
	"github.com/rodon-compute/rodon/internal/manifest"
)

// Confinement (docs/design/agents.md, §0.5): a path a tool is given names
// a path of the workspace's head (relative, or /workspace/...) or, for
// reading only, of the account library (/library/...). Everything else is
// refused before any tree is read, with the path the caller probably
// meant. The path grammar is manifest.Clean's: Resolve only strips the
// prefixes, detects the tricks worth a better message (look-alikes,
// percent-encoding, case), and resolves symlinks lexically inside the
// tree.

// Prefixes of the paths a tool is given.
const (
	workspacePrefix = "/workspace"
	libraryPrefix   = "/library"
)

// maxLinks bounds the symlinks one resolution goes through.
const maxLinks = 40

// Target is where a path resolved to.
type Target struct {
	// Tree is the tree the path is in: the workspace's head, or the
	// library's.
	Tree    Tree
	Library bool
	// Path is the tree path after symlinks; "" is the tree's root (the
	// workspace or the library itself, as Glob and Grep take it).
	Path string
	// Entry is what is at Path (a directory that only its entries imply
	// has type dir); nil when nothing is.
	Entry *api.TreeEntry
}

// Name is the target as results show it: a workspace path relative
// (data/sales.csv), a library path absolute (/library/x.csv).
func (t Target) Name() string {
	switch {
	case t.Library && t.Path == "":
		return libraryPrefix
	case t.Library:
		return libraryPrefix + "/" + t.Path
	case t.Path == "":
		return workspacePrefix
	}
	return t.Path
}

// IsDir reports whether the target is a directory (the root included).
func (t Target) IsDir() bool {
	return t.Path == "" || t.Entry != nil && t.Entry.Type == string(manifest.Dir)
}

// refuse is a refusal of path p.
func refuse(reason, p, suggestion, format string, args ...any) *Refusal {
	msg := fmt.Sprintf(format, args...)
	if suggestion != "" {
		msg += "; did you mean " + suggestion + "?"
	}
	return &Refusal{api.Refusal{Reason: reason, Message: msg, Path: p, DidYouMean: suggestion}}
}

// quote is p as a message names it: as it is when it prints plainly, Go
// quoted when it holds anything else, cut to 200 bytes.
func quote(p string) string {
	q := p
	if len(q) > 200 {
		q = q[:200]
		for !utf8.ValidString(q) && len(q) > 190 {
			q = q[:len(q)-1]
		}
		q += "..."
	}
	plain := utf8.ValidString(q) && strings.IndexFunc(q, func(r rune) bool {
		return unicode.IsControl(r) || unicode.IsSpace(r) || r == '"'
	}) < 0
	if plain {
		return q
	}
	return fmt.Sprintf("%q", q)
}

// Resolve confines path p, given by a caller of a tool, to head (the
// workspace's head tree) or, when not write, library (nil when the
// account has none). Any path it refuses is a *Refusal (reasons
// api.RefusedPath, api.RefusedLookalike, api.RefusedReadOnly) whose
// message names p and, when there is one, the existing workspace path p
// probably meant. A path that is valid but names nothing is a Target
// without Entry. Relative paths, /workspace and /workspace/... are the
// workspace's; /library and /library/... the library's.
func Resolve(head, library Tree, p string, write bool) (Target, error) {
	return resolve(head, indexOf(head), library, p, write)
}

// resolve is Resolve with head's index built.
func resolve(head Tree, ix *index, library Tree, p string, write bool) (Target, error) {
	// Before any grammar: what only a message can help with.
	if len(p) > len(workspacePrefix)+1+manifest.DefaultLimits.MaxPathBytes {
		return Target{}, refuse(api.RefusedPath, p, "", "path %s is %d bytes long, more than a path may be (%d)", quote(p), len(p), manifest.DefaultLimits.MaxPathBytes)
	}
	if !utf8.ValidString(p) {
		return Target{}, refuse(api.RefusedPath, p, "", "path %s is not UTF-8", quote(p))
	}
	for _, r := range p {
		if r == 0 || unicode.IsControl(r) {
			// The path up to a NUL is what a C caller would have read.
			meant, _, _ := strings.Cut(p, "\x00")
			return Target{}, refuse(api.RefusedPath, p, ix.suggest(strings.Map(dropControl, meant)), "path %s holds %U: NUL and control characters are refused", quote(p), r)
		}
	}
	if n := norm.NFKC.String(p); n != p {
		return Target{}, refuse(api.RefusedLookalike, p, ix.suggestExact(n),
			"path %s holds characters that look like others (under NFKC it reads %s); write paths in plain characters", quote(p), quote(n))
	}
	if strings.ContainsRune(p, '\\') {
		return Target{}, refuse(api.RefusedPath, p, ix.suggest(strings.ReplaceAll(p, `\`, "/")), "path %s holds a backslash: separate components with /", quote(p))
	}
	if d := percentDecoded(p); d != p && escapes(d) {
		return Target{}, refuse(api.RefusedPath, p, ix.suggest(d),
			"path %s is refused: percent-decoded it reads %s, which leaves the workspace (paths are taken as written, %% sequences are not decoded)", quote(p), quote(d))
	}

	t := Target{Tree: head}
	rest := p
	switch {
	case p == "" || p == "." || p == "./" || p == workspacePrefix || p == workspacePrefix+"/":
		rest = ""
	case p == libraryPrefix || p == libraryPrefix+"/":
		t.Library, rest = true, ""
	case strings.HasPrefix(p, libraryPrefix+"/"):
		t.Library, rest = true, strings.TrimPrefix(p, libraryPrefix+"/")
	case strings.HasPrefix(p, workspacePrefix+"/"):
		rest = strings.TrimPrefix(p, workspacePrefix+"/")
	case strings.HasPrefix(p, "/"):
		return Target{}, refuse(api.RefusedPath, p, ix.suggest(p), "path %s is outside the workspace", quote(p))
	}
	if t.Library {
		if write {
			return Target{}, refuse(api.RefusedReadOnly, p, "", "path %s is in the account library, which is read-only", quote(p))
		}
		if library == nil {
			return Target{}, refuse(api.RefusedPath, p, ix.suggest(rest), "path %s: this account has no library", quote(p))
		}
		t.Tree = library
	}
	if rest != "" {
		clean, err := manifest.Clean(rest, manifest.DefaultLimits)
		if err != nil {
			what := "is outside the workspace"
			if !strings.Contains("/"+rest+"/", "/../") {
				what = "is not a path a workspace holds"
			}
			return Target{}, refuse(api.RefusedPath, p, ix.suggest(p), "path %s %s (%v)", quote(p), what, err)
		}
		rest = clean
	}
	tix := ix
	if t.Library {
		tix = indexOf(library)
	}
	resolved, err := tix.resolveLinks(rest)
	if err != nil {
		return Target{}, refuse(api.RefusedPath, p, "", "path %s %v", quote(p), err)
	}
	t.Path = resolved
	if e, ok := tix.lookup(resolved); ok {
		t.Entry = &e
	}
	if write && !t.Library {
		for _, q := range []string{rest, resolved} {
			if q == "agents" || strings.HasPrefix(q, "agents/") {
				return Target{}, refuse(api.RefusedReadOnly, p, "", "path %s is under agents/: no tool writes under agents/", quote(p))
			}
		}
	}
	// Case tricks: paths are case-sensitive; a path naming nothing that
	// names something when case is folded is refused with that path.
	if t.Entry == nil && rest != "" && !t.Library {
		if m, ok := ix.folded(resolved); ok {
			return Target{}, refuse(api.RefusedPath, p, workspacePrefix+"/"+m, "path %s is not in the workspace (paths are case-sensitive)", quote(p))
		}
	}
	return t, nil
}

func dropControl(r rune) rune {
	if r == 0 || unicode.IsControl(r) {
		return -1
	}
	return r
}

// percentDecoded is p with its percent sequences decoded, again and
// again (%252e is %2e is .), up to a few times.
func percentDecoded(p string) string {
	for range 4 {
		d, err := url.PathUnescape(p)
		if err != nil || d == p {
			return p
		}
		p = d
	}
	return p
}

// escapes reports whether p, taken as a tool's path, would leave the
// workspace and library: absolute elsewhere, a ".." component, a
// backslash, NUL or a control character.
func escapes(p string) bool {
	if strings.HasPrefix(p, "/") && p != workspacePrefix && p != libraryPrefix &&
		!strings.HasPrefix(p, workspacePrefix+"/") && !strings.HasPrefix(p, libraryPrefix+"/") {
		return true
	}
	if strings.IndexFunc(p, func(r rune) bool { return r == 0 || r == '\\' || unicode.IsControl(r) }) >= 0 {
		return true
	}
	for _, n := range strings.Split(p, "/") {
		if n == ".." {
			return true
		}
	}
	return false
}

// resolveLinks resolves the symlinks of tree path p lexically, inside the
// tree: a link's target is joined to its directory, and a target that
// would leave the tree (the manifest refuses those, but a tree is checked
// anyway) is an error. A path with no link is itself.
func (ix *index) resolveLinks(p string) (string, error) {
	if p == "" {
		return "", nil
	}
	links := 0
	done := ""
	todo := strings.Split(p, "/")
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		cur := name
		if done != "" {
			cur = done + "/" + name
		}
		e, ok := ix.exact(cur)
		if !ok || e.Type != string(manifest.Symlink) {
			done = cur
			continue
		}
		if links++; links > maxLinks {
			return "", fmt.Errorf("goes through more than %d symlinks", maxLinks)
		}
		if manifest.CheckTarget(cur, e.Target, manifest.DefaultLimits) != nil {
			return "", fmt.Errorf("goes through symlink %s, which points outside the workspace (%s)", quote(cur), quote(e.Target))
		}
		j := path.Join(path.Dir(cur), e.Target)
		if j == "." {
			j = ""
		}
		rest := strings.Join(todo, "/")
		switch {
		case j == "" && rest == "":
			return "", nil
		case j == "":
			j = rest
		case rest != "":
			j += "/" + rest
		}
		done, todo = "", strings.Split(j, "/")
	}
	if done == ".." || strings.HasPrefix(done, "../") || strings.HasPrefix(done, "/") {
		return "", fmt.Errorf("leaves the workspace")
	}
	return done, nil
}
