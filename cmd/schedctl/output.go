package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// lockedWriter serializes writes to w: the step's output and warnings
// from background goroutines share stderr.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// warnf returns a function that prints a warning of the named command on
// stderr.
func (c *cli) warnf(name string) func(string, ...any) {
	return func(format string, args ...any) {
		fmt.Fprintf(c.stderr, "schedctl %s: %s\n", name, fmt.Sprintf(format, args...))
	}
}

// printJSON writes v as indented JSON and a newline.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// table writes aligned columns: one row per call of row, flushed by flush.
type table struct {
	tw *tabwriter.Writer
}

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)}
	if len(header) > 0 {
		t.row(header...)
	}
	return t
}

func (t *table) row(cells ...string) {
	for i, c := range cells {
		if c == "" {
			cells[i] = "-"
		}
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// fmtBytes writes a byte count the way --memory takes it (512Mi, 2Gi).
func fmtBytes(n int64) string {
	units := []string{"", "Ki", "Mi", "Gi", "Ti"}
	f := float64(n)
	i := 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if i == 0 {
		return strconv.FormatInt(n, 10)
	}
	return strings.TrimSuffix(strconv.FormatFloat(f, 'f', 1, 64), ".0") + units[i]
}

// fmtCPU writes a number of cores.
func fmtCPU(c float64) string { return strconv.FormatFloat(c, 'f', -1, 64) }

// fmtTime writes t in RFC 3339 (UTC, seconds), or "" when zero.
func fmtTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// fmtAge writes how long ago t was, rounded for people ("3m12s"), or ""
// when t is zero.
func fmtAge(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "0s"
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		return d.Round(time.Minute).String()
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
