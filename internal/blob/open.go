package blob

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// URLForms is what a --blob-store URL may be, for error messages and
// flag help.
const URLForms = "local, local:///ABSOLUTE/PATH or s3://BUCKET[/PREFIX]?endpoint=HOST:PORT[&region=R][&secure=false][&credentials-file=PATH]"

// Open returns the store a --blob-store URL names:
//
//   - "local" (or ""): a Local in DATADIR/blobs, its key in DATADIR/blob-key;
//   - "local:///ABSOLUTE/PATH": a Local in that directory (one several
//     members may share), its key in PATH/.key;
//   - "s3://BUCKET[/PREFIX]?endpoint=HOST:PORT&region=R&secure=BOOL": an S3
//     bucket (made if missing), objects under PREFIX; region defaults to
//     us-east-1, secure (HTTPS) to true. The credentials are read from
//     the file credentials-file=PATH (the access key on its first line,
//     the secret key on its second) or else from the environment
//     (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY); never from the URL.
//
// baseURL is where the caller serves a Local's Handler (its URLs point
// there). A bad URL is refused with an error naming the part at fault.
func Open(ctx context.Context, rawURL, dataDir, baseURL string, logger *slog.Logger) (Store, error) {
	loc, err := parseURL(rawURL, dataDir)
	if err != nil {
		return nil, err
	}
	if loc.s3 != nil {
		if err := loc.s3.credentials(); err != nil {
			return nil, err
		}
		s, err := NewS3(ctx, loc.s3.S3Config)
		if err != nil {
			return nil, err
		}
		logger.Info("blob store", "kind", "s3", "s3", loc.s3.S3Config)
		return s, nil
	}
	key, err := LoadOrCreateKey(loc.key)
	if err != nil {
		return nil, err
	}
	l, err := NewLocal(loc.dir, key, baseURL)
	if err != nil {
		return nil, err
	}
	logger.Info("blob store", "kind", "local", "dir", loc.dir)
	return l, nil
}

// location is a parsed --blob-store URL: a Local's directory and key
// file, or an S3 config.
type location struct {
	dir, key string
	s3       *s3Location
}

// s3Location is an S3 config whose credentials come from credFile, or
// the environment when it is empty.
type s3Location struct {
	S3Config
	credFile string
}

func parseURL(raw, dataDir string) (location, error) {
	if raw == "" || raw == "local" {
		if dataDir == "" {
			return location{}, errors.New("blob store local: no data directory to keep it in")
		}
		return location{dir: filepath.Join(dataDir, "blobs"), key: filepath.Join(dataDir, "blob-key")}, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url's errors quote the whole URL: say less, it may hold a secret.
		return location{}, fmt.Errorf("blob store URL: not a URL: want %s", URLForms)
	}
	if u.User != nil {
		return location{}, fmt.Errorf("blob store URL %s: user information in the URL is refused: put credentials in credentials-file=PATH or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", u.Redacted())
	}
	if u.Fragment != "" {
		return location{}, fmt.Errorf("blob store URL %s: a fragment (#%s) means nothing here", u.Redacted(), u.Fragment)
	}
	switch u.Scheme {
	case "local":
		return parseLocal(u)
	case "s3":
		return parseS3(u)
	case "":
		return location{}, fmt.Errorf("blob store URL %q: no scheme: want %s", raw, URLForms)
	default:
		return location{}, fmt.Errorf("blob store URL %s: scheme %q: want %s", u.Redacted(), u.Scheme, URLForms)
	}
}

func parseLocal(u *url.URL) (location, error) {
	switch {
	case u.Opaque != "" || u.Host != "":
		return location{}, fmt.Errorf("blob store URL %s: a local store is local:///ABSOLUTE/PATH (three slashes, no host)", u.Redacted())
	case u.RawQuery != "":
		return location{}, fmt.Errorf("blob store URL %s: a local store takes no query (?%s)", u.Redacted(), u.RawQuery)
	case !filepath.IsAbs(u.Path) || filepath.Clean(u.Path) == "/":
		return location{}, fmt.Errorf("blob store URL %s: path %q: want an absolute directory other than /", u.Redacted(), u.Path)
	}
	dir := filepath.Clean(u.Path)
	return location{dir: dir, key: filepath.Join(dir, ".key")}, nil
}

func parseS3(u *url.URL) (location, error) {
	bad := func(format string, a ...any) (location, error) {
		return location{}, fmt.Errorf("blob store URL %s: %s", u.Redacted(), fmt.Sprintf(format, a...))
	}
	if u.Opaque != "" {
		return bad("want s3://BUCKET[/PREFIX]?endpoint=HOST:PORT")
	}
	if err := checkBucket(u.Host); err != nil {
		return bad("%v", err)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return bad("query: %v", err)
	}
	loc := &s3Location{S3Config: S3Config{Bucket: u.Host, Region: "us-east-1", Secure: true, Prefix: strings.Trim(u.Path, "/")}}
	for k, v := range q {
		if len(v) != 1 {
			return bad("%s given %d times", k, len(v))
		}
		switch k {
		case "endpoint":
			host, port, err := net.SplitHostPort(v[0])
			if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
				return bad("endpoint %q: want HOST:PORT", v[0])
			}
			loc.Endpoint = v[0]
		case "region":
			if v[0] == "" {
				return bad("region is empty")
			}
			loc.Region = v[0]
		case "secure":
			b, err := strconv.ParseBool(v[0])
			if err != nil {
				return bad("secure %q: want true or false", v[0])
			}
			loc.Secure = b
		case "credentials-file":
			if !filepath.IsAbs(v[0]) {
				return bad("credentials-file %q: want an absolute path", v[0])
			}
			loc.credFile = v[0]
		default:
			return bad("unknown parameter %q: want endpoint, region, secure or credentials-file", k)
		}
	}
	if loc.Endpoint == "" {
		return bad("no endpoint=HOST:PORT (the S3 server)")
	}
	for _, part := range strings.Split(loc.Prefix, "/") {
		if loc.Prefix != "" && (part == "" || part == "." || part == "..") {
			return bad("prefix %q: want path components without empty, . or ..", loc.Prefix)
		}
	}
	return location{s3: loc}, nil
}

// checkBucket checks an S3 bucket name: 3 to 63 lower-case letters,
// digits, dots and hyphens, starting and ending with a letter or digit.
func checkBucket(b string) error {
	if len(b) < 3 || len(b) > 63 {
		return fmt.Errorf("bucket %q: want 3 to 63 characters", b)
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || (c == '.' || c == '-') && i > 0 && i < len(b)-1) {
			return fmt.Errorf("bucket %q: want lower-case letters, digits, dots and hyphens, starting and ending with a letter or digit", b)
		}
	}
	return nil
}

// credentials fills in the access and secret key from the credentials
// file, or the environment.
func (l *s3Location) credentials() error {
	if l.credFile == "" {
		l.AccessKey, l.SecretKey = os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
		if l.AccessKey == "" || l.SecretKey == "" {
			return errors.New("blob store s3: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or credentials-file=PATH in the URL")
		}
		return nil
	}
	f, err := os.Open(l.credFile)
	if err != nil {
		return fmt.Errorf("blob store s3: credentials file: %w", err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if s := strings.TrimSpace(sc.Text()); s != "" {
			lines = append(lines, s)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("blob store s3: credentials file %s: %w", l.credFile, err)
	}
	if len(lines) != 2 {
		return fmt.Errorf("blob store s3: credentials file %s: %d non-empty lines, want 2 (the access key, then the secret key)", l.credFile, len(lines))
	}
	l.AccessKey, l.SecretKey = lines[0], lines[1]
	return nil
}
