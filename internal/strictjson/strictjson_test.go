package strictjson

import (
	"errors"
	"strings"
	"testing"
	"time"
)

type dur time.Duration

func (d *dur) UnmarshalJSON(b []byte) error {
	v, err := time.ParseDuration(strings.Trim(string(b), `"`))
	*d = dur(v)
	return err
}

type req struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
	Inner struct {
		Wait dur `json:"wait"`
	} `json:"inner"`
	List []struct {
		Wait dur `json:"wait"`
	} `json:"list"`
}

func TestDecode(t *testing.T) {
	for _, tt := range []struct {
		body     string
		optional bool
		want     string // "" for no error
	}{
		{`{"name":"a","count":2}`, false, ""},
		{``, true, ""},
		{``, false, "empty request body"},
		{`{"name":"a"} {}`, false, "unexpected data after the object at byte offset"},
		{`{"name":"a",}`, false, "malformed JSON at byte offset"},
		{`{"name":`, false, "ends in the middle of a value"},
		{`{"count":"x"}`, false, `field "count": want an integer, got string`},
		{`{"bogus":1}`, false, `unknown field "bogus": see docs/X.md`},
		{`[1]`, false, "want a JSON object, got array"},
		{`{"inner":{"wait":"soon"}}`, false, `field "inner.wait"`},
		{`{"list":[{"wait":"1s"},{"wait":"later"}]}`, false, `field "list[1].wait"`},
	} {
		var v req
		err := Decode(strings.NewReader(tt.body), &v, Options{Optional: tt.optional, Docs: "docs/X.md"})
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("Decode(%q) = %v, want nil", tt.body, err)
		case tt.want != "":
			var e *Error
			if !errors.As(err, &e) || !strings.Contains(e.Msg, tt.want) {
				t.Errorf("Decode(%q) = %v, want an *Error naming %q", tt.body, err, tt.want)
			}
		}
	}
}
