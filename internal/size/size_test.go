package size

import "testing"

func TestParse(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{"2048", 2048, false},
		{"512m", 512 << 20, false},
		{"512M", 512 << 20, false},
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
