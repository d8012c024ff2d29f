// Package textdiff is the one unified diff of Rodon (the scheduler's diff
// route, an agent's proposals): a diff of lines, from the longest common
// subsequence of the lines between the common head and tail of both
// sides. Its table is bounded (maxDiffCells): past it, the middle is
// shown as removed, then added.
package textdiff

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// maxDiffCells bounds the LCS table of one file's diff.
const maxDiffCells = 4 << 20

// diffContext is the lines of context around a change.
const diffContext = 3

// IsText reports whether b reads as text: UTF-8 without NUL.
func IsText(b string) bool {
	return utf8.ValidString(b) && !strings.ContainsRune(b, 0)
}

// splitLines splits s into lines, each with its newline.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	l := strings.SplitAfter(s, "\n")
	if l[len(l)-1] == "" {
		l = l[:len(l)-1]
	}
	return l
}

// diffOp is one line of an edit script: ' ', '-' or '+'.
type diffOp struct {
	kind byte
	line string
}

// diffLines returns the edit script from a to b.
func diffLines(a, b []string) []diffOp {
	var ops []diffOp
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		ops = append(ops, diffOp{' ', a[pre]})
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	ma, mb := a[pre:len(a)-suf], b[pre:len(b)-suf]
	n, m := len(ma), len(mb)
	if n*m > maxDiffCells {
		for _, l := range ma {
			ops = append(ops, diffOp{'-', l})
		}
		for _, l := range mb {
			ops = append(ops, diffOp{'+', l})
		}
	} else {
		// lcs[i*(m+1)+j] is the LCS of ma[i:] and mb[j:].
		lcs := make([]int32, (n+1)*(m+1))
		for i := n - 1; i >= 0; i-- {
			for j := m - 1; j >= 0; j-- {
				if ma[i] == mb[j] {
					lcs[i*(m+1)+j] = lcs[(i+1)*(m+1)+j+1] + 1
				} else {
					lcs[i*(m+1)+j] = max(lcs[(i+1)*(m+1)+j], lcs[i*(m+1)+j+1])
				}
			}
		}
		i, j := 0, 0
		for i < n || j < m {
			switch {
			case i < n && j < m && ma[i] == mb[j]:
				ops = append(ops, diffOp{' ', ma[i]})
				i++
				j++
			case i < n && (j == m || lcs[(i+1)*(m+1)+j] >= lcs[i*(m+1)+j+1]):
				ops = append(ops, diffOp{'-', ma[i]})
				i++
			default:
				ops = append(ops, diffOp{'+', mb[j]})
				j++
			}
		}
	}
	for _, l := range a[len(a)-suf:] {
		ops = append(ops, diffOp{' ', l})
	}
	return ops
}

// Unified returns the unified diff of path p from a to b ("" when they
// are equal), cut at limit bytes (truncated true).
func Unified(p, a, b string, limit int) (string, bool) {
	ops := diffLines(splitLines(a), splitLines(b))
	var sb strings.Builder
	fmt.Fprintf(&sb, "--- a/%s\n+++ b/%s\n", p, p)
	header := sb.Len()
	// Hunks: runs of changes with diffContext lines around them.
	ai, bi := 0, 0 // line numbers (0-based) at ops[k]
	for k := 0; k < len(ops); {
		if ops[k].kind == ' ' {
			ai, bi, k = ai+1, bi+1, k+1
			continue
		}
		start := max(k-diffContext, 0)
		for s := start; s < k; s++ {
			ai, bi = ai-1, bi-1
		}
		end := k
		for end < len(ops) {
			if ops[end].kind != ' ' {
				end++
				continue
			}
			run := end
			for run < len(ops) && ops[run].kind == ' ' {
				run++
			}
			if run == len(ops) || run-end > 2*diffContext {
				end = min(end+diffContext, len(ops))
				break
			}
			end = run
		}
		na, nb := 0, 0
		for _, op := range ops[start:end] {
			if op.kind != '+' {
				na++
			}
			if op.kind != '-' {
				nb++
			}
		}
		fmt.Fprintf(&sb, "@@ -%s +%s @@\n", hunkRange(ai, na), hunkRange(bi, nb))
		for _, op := range ops[start:end] {
			sb.WriteByte(op.kind)
			sb.WriteString(op.line)
			if !strings.HasSuffix(op.line, "\n") {
				sb.WriteString("\n\\ No newline at end of file\n")
			}
			if sb.Len() > limit {
				return sb.String()[:limit], true
			}
		}
		ai, bi, k = ai+na, bi+nb, end
	}
	if sb.Len() == header {
		return "", false
	}
	return sb.String(), false
}

// hunkRange is a hunk header's range: first line (1-based) and count.
func hunkRange(start, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", start)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}
