package blob

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want location
		err  string // a part of the error; "" for none
	}{
		{url: "", want: location{dir: "/d/blobs", key: "/d/blob-key"}},
		{url: "local", want: location{dir: "/d/blobs", key: "/d/blob-key"}},
		{url: "local:///srv/blobs/", want: location{dir: "/srv/blobs", key: "/srv/blobs/.key"}},
		{url: "s3://rodon-blobs?endpoint=127.0.0.1:8333&secure=false", want: location{s3: &s3Location{
			S3Config: S3Config{Endpoint: "127.0.0.1:8333", Bucket: "rodon-blobs", Region: "us-east-1"}}}},
		{url: "s3://b.example/ws/a?endpoint=s3.example:443&region=eu-west-1&credentials-file=/etc/rodon/s3", want: location{s3: &s3Location{
			S3Config: S3Config{Endpoint: "s3.example:443", Bucket: "b.example", Region: "eu-west-1", Secure: true, Prefix: "ws/a"},
			credFile: "/etc/rodon/s3"}}},

		{url: "locale", err: `no scheme`},
		{url: "local://srv/blobs", err: "three slashes, no host"},
		{url: "local:relative", err: "three slashes, no host"},
		{url: "local:///", err: `path "/": want an absolute directory other than /`},
		{url: "local:///srv?x=1", err: "takes no query"},
		{url: "file:///srv", err: `scheme "file"`},
		{url: "s3://Bucket?endpoint=h:1", err: `bucket "Bucket"`},
		{url: "s3://ab?endpoint=h:1", err: `bucket "ab": want 3 to 63`},
		{url: "s3://-ab?endpoint=h:1", err: `bucket "-ab"`},
		{url: "s3://bucket", err: "no endpoint=HOST:PORT"},
		{url: "s3://bucket?endpoint=h", err: `endpoint "h": want HOST:PORT`},
		{url: "s3://bucket?endpoint=h:x", err: `endpoint "h:x": want HOST:PORT`},
		{url: "s3://bucket?endpoint=:80", err: `endpoint ":80"`},
		{url: "s3://bucket?endpoint=h:1&secure=maybe", err: `secure "maybe": want true or false`},
		{url: "s3://bucket?endpoint=h:1&region=", err: "region is empty"},
		{url: "s3://bucket?endpoint=h:1&endpoint=h:2", err: "endpoint given 2 times"},
		{url: "s3://bucket?endpoint=h:1&acl=public", err: `unknown parameter "acl"`},
		{url: "s3://bucket?endpoint=h:1&credentials-file=creds", err: `credentials-file "creds": want an absolute path`},
		{url: "s3://bucket/a//b?endpoint=h:1", err: `prefix "a//b"`},
		{url: "s3://bucket/a/../b?endpoint=h:1", err: `prefix "a/../b"`},
		{url: "s3://AKIA:s3cr3t@bucket?endpoint=h:1", err: "user information in the URL is refused"},
		{url: "s3://bucket?endpoint=h:1#x", err: "a fragment"},
	} {
		got, err := parseURL(tc.url, "/d")
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseURL(%q) = %v, want an error naming %q", tc.url, err, tc.err)
			}
			if err != nil && strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("parseURL(%q) = %v: the error shows the secret", tc.url, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseURL(%q) = %v", tc.url, err)
			continue
		}
		if d := cmp.Diff(tc.want, got, cmp.AllowUnexported(location{}, s3Location{})); d != "" {
			t.Errorf("parseURL(%q) (-want +got):\n%s", tc.url, d)
		}
	}
	if _, err := parseURL("local", ""); err == nil {
		t.Error(`parseURL("local") without a data directory succeeded`)
	}
}

func TestS3Credentials(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(s), 0o600)
		return p
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "env-ak")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "env-sk")
	for _, tc := range []struct {
		file     string
		ak, sk   string
		err      string
		unsetEnv bool
	}{
		{file: "", ak: "env-ak", sk: "env-sk"},
		{file: write("good", "file-ak\nfile-sk\n"), ak: "file-ak", sk: "file-sk"},
		{file: write("one", "file-ak\n"), err: "1 non-empty lines, want 2"},
		{file: filepath.Join(dir, "absent"), err: "credentials file"},
		{file: "", unsetEnv: true, err: "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"},
	} {
		if tc.unsetEnv {
			t.Setenv("AWS_SECRET_ACCESS_KEY", "")
		}
		l := &s3Location{credFile: tc.file}
		err := l.credentials()
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("credentials(%q) = %v, want an error naming %q", tc.file, err, tc.err)
			}
			continue
		}
		if err != nil || l.AccessKey != tc.ak || l.SecretKey != tc.sk {
			t.Errorf("credentials(%q) = %q, %q, %v, want %q, %q", tc.file, l.AccessKey, l.SecretKey, err, tc.ak, tc.sk)
		}
	}
}

func TestS3ConfigHidesCredentials(t *testing.T) {
	c := S3Config{Endpoint: "h:1", Bucket: "b", AccessKey: "AKIAXYZ", SecretKey: "s3cr3t"}
	var buf strings.Builder
	for _, s := range []string{c.String(), c.LogValue().String()} {
		buf.WriteString(s)
	}
	if strings.Contains(buf.String(), "AKIAXYZ") || strings.Contains(buf.String(), "s3cr3t") {
		t.Errorf("S3Config prints as %q: it shows a credential", buf.String())
	}
}
