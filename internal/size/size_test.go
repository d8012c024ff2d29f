package size

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{"2048", 2048, false},
		{"512m", 512 << 20, false},
		// Upper-case SI units are decimal (Kubernetes); lower-case binary.
		{"512M", 512e6, false},
		{"1G", 1e9, false},
		{"1g", 1 << 30, false},
		{"1Gi", 1 << 30, false},
		{"2GB", 2e9, false},
		{"1K", 1000, false},
		{"1k", 1024, false},
		{"1Ki", 1024, false},
		{"64Mi", 64 << 20, false},
		{"64MiB", 64 << 20, false},
		{"1gib", 1 << 30, false},
		{"1T", 1e12, false},
		{"2t", 2 << 40, false},
		{"1P", 1e15, false},
		{"1Pi", 1 << 50, false},
		{"0", 0, false},
		{"0.5k", 512, false},
		{"1.5", 1, false},
		{"4194304Ti", 1 << 62, false},
		{"4194304.1Ti", 0, true},
		{"1Mb", 0, true},
		{"1MIB", 0, true},
		{"1mi", 0, true},
		{"1 k", 0, true},
		{"1e3", 0, true},
		{"+1k", 0, true},
		{"0x10", 0, true},
		{".5k", 0, true},
		{"1.k", 0, true},
		{"k", 0, true},
		{"1E", 0, true},
		{"Inf", 0, true},
		{"1.5GiB", 3 << 29, false},
		{"64mb", 64 << 20, false},
		{" 1k ", 1024, false},
		{"10b", 10, false},
		{"", 0, true},
		{"-1m", 0, true},
		{"lots", 0, true},
		{"NaN", 0, true},
		{"1e30g", 0, true},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("Parse(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestFormat(t *testing.T) {
	for _, tt := range []struct {
		in   int64
		want string
	}{
		{0, "0B"}, {512, "512B"}, {64 << 10, "64KiB"}, {64 << 20, "64MiB"}, {1 << 30, "1GiB"}, {3<<30 + 1<<29, "3.5GiB"}, {64 << 30, "64GiB"},
	} {
		got := Format(tt.in)
		if got != tt.want {
			t.Errorf("Format(%d) = %q, want %q", tt.in, got, tt.want)
		}
		if back, err := Parse(got); err != nil || back != tt.in {
			t.Errorf("Parse(Format(%d)) = %d, %v; want it back", tt.in, back, err)
		}
	}
}

func TestErrorNamesTheInputAndTheForms(t *testing.T) {
	_, err := Parse("12 parsecs")
	if err == nil || !strings.Contains(err.Error(), `"12 parsecs"`) || !strings.Contains(err.Error(), Forms) {
		t.Errorf("Parse error %v; want it to name the input and %q", err, Forms)
	}
	_, err = Parse("9999999P")
	if err == nil || !strings.Contains(err.Error(), `"9999999P": too large`) {
		t.Errorf("Parse error %v; want it to say the input is too large", err)
	}
}

// FuzzParse checks that whatever Parse accepts is a size in [0, Max],
// that it refuses signs, and that a binary unit is 1024 of the one before.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"512Mi", "1G", "0", "-1Ki", "9223372036854775807Gi", "1.5g", " 2k"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := Parse(s)
		if err != nil {
			return
		}
		if n < 0 || n > Max {
			t.Fatalf("Parse(%q) = %d, outside [0, %d]", s, n, int64(Max))
		}
		if strings.ContainsAny(s, "-+eExX") { // no unit has these letters
			t.Fatalf("Parse(%q) = %d, nil; want a sign, exponent or hexadecimal refused", s, n)
		}
	})
}

func TestFlag(t *testing.T) {
	var f Flag
	if err := f.Set("512Mi"); err != nil || f != 512<<20 {
		t.Fatalf("Set(512Mi) = %v, flag %d", err, f)
	}
	if got, want := f.String(), Format(512<<20); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if err := f.Set("12 bananas"); err == nil || f != 512<<20 {
		t.Errorf("Set(12 bananas) = %v, flag %d: want an error and the flag kept", err, f)
	}
}
