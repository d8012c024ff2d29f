package blob

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Config says where an S3 store lives. AccessKey and SecretKey are
// never logged nor printed (see String and LogValue).
type S3Config struct {
	// Endpoint is HOST:PORT of the S3 server.
	Endpoint string
	Bucket   string
	// Region is the bucket's region ("us-east-1" when empty).
	Region    string
	AccessKey string
	SecretKey string
	// Secure: HTTPS to the endpoint.
	Secure bool
	// Prefix is put before every key ("blobs/DIGEST", "tmp/..."), so that
	// several stores can share a bucket.
	Prefix string
}

// String prints the config without its credentials.
func (c S3Config) String() string {
	scheme := "http"
	if c.Secure {
		scheme = "https"
	}
	return fmt.Sprintf("s3://%s/%s at %s://%s", c.Bucket, c.Prefix, scheme, c.Endpoint)
}

// LogValue logs the config without its credentials.
func (c S3Config) LogValue() slog.Value {
	return slog.GroupValue(slog.String("endpoint", c.Endpoint), slog.String("bucket", c.Bucket),
		slog.String("region", c.Region), slog.String("prefix", c.Prefix), slog.Bool("secure", c.Secure))
}

// S3 is a Store in an S3 bucket: blob D at PREFIX/blobs/D. Put streams
// into a temporary object PREFIX/tmp/RANDOM while hashing, and only once
// the bytes are checked copies it (server side) to the blob's key: no
// unchecked bytes are stored under a digest by Put. A presigned PUT URL
// is S3's own and S3 does not check our digest, so what such a URL
// stored is checked by Verify, which removes a blob whose bytes do not
// match.
type S3 struct {
	c      *minio.Client
	tr     *http.Transport
	bucket string
	prefix string
}

// partSize is the part of a multipart upload: the memory one Put holds
// (S3 allows 10,000 parts, so blobs up to 160 GiB).
const partSize = 16 << 20

// maxCopy is the largest object CopyObject copies; larger ones are
// composed of parts.
const maxCopy = 5 << 30

// NewS3 returns the store cfg names, making its bucket if missing.
func NewS3(ctx context.Context, cfg S3Config) (*S3, error) {
	switch {
	case cfg.Endpoint == "":
		return nil, errors.New("s3 blob store: no endpoint")
	case cfg.Bucket == "":
		return nil, errors.New("s3 blob store: no bucket")
	case cfg.AccessKey == "" || cfg.SecretKey == "":
		return nil, errors.New("s3 blob store: no credentials (access key and secret key)")
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	tr, err := minio.DefaultTransport(cfg.Secure)
	if err != nil {
		return nil, fmt.Errorf("s3 blob store %v: %w", cfg, err)
	}
	c, err := minio.New(cfg.Endpoint, &minio.Options{
		Transport:    tr,
		Creds:        credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:       cfg.Secure,
		Region:       cfg.Region,
		BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		return nil, fmt.Errorf("s3 blob store %v: %w", cfg, err)
	}
	prefix := strings.Trim(cfg.Prefix, "/")
	if prefix != "" {
		prefix += "/"
	}
	s := &S3{c: c, tr: tr, bucket: cfg.Bucket, prefix: prefix}
	ok, err := c.BucketExists(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("s3 blob store %v: look up bucket: %w", cfg, err)
	}
	if !ok {
		err := c.MakeBucket(ctx, cfg.Bucket, minio.MakeBucketOptions{Region: cfg.Region})
		if code := minio.ToErrorResponse(err).Code; err != nil && code != "BucketAlreadyOwnedByYou" && code != "BucketAlreadyExists" {
			return nil, fmt.Errorf("s3 blob store %v: make bucket: %w", cfg, err)
		}
	}
	s.sweep(ctx)
	return s, nil
}

// sweep removes temporary objects a day old: Puts of a process that died.
// It is best effort; what it misses, the next start removes.
func (s *S3) sweep(ctx context.Context) {
	for o := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + "tmp/", Recursive: true}) {
		if o.Err != nil {
			return
		}
		if time.Since(o.LastModified) > 24*time.Hour {
			s.c.RemoveObject(ctx, s.bucket, o.Key, minio.RemoveObjectOptions{})
		}
	}
}

func (s *S3) key(digest string) string { return s.prefix + "blobs/" + digest }

// notFound reports whether err is S3's answer for an absent object.
func notFound(err error) bool {
	code := minio.ToErrorResponse(err).Code
	return code == "NoSuchKey" || code == "NotFound"
}

// Put implements Store.
func (s *S3) Put(ctx context.Context, digest string, r io.Reader, size int64) error {
	if err := checkDigest(digest); err != nil {
		return err
	}
	if size < -1 {
		return fmt.Errorf("put blob %s: size %d: want -1 (unknown) or more", digest, size)
	}
	if have, err := s.Stat(ctx, digest); err == nil {
		if size >= 0 && have != size {
			return fmt.Errorf("put blob %s: %d bytes, the stored blob has %d: %w", digest, size, have, ErrDigest)
		}
		return nil
	} else if !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("put blob %s: %w", digest, err)
	}
	tmp, err := s.upload(ctx, r, size, -1)
	if err != nil {
		return fmt.Errorf("put blob %s: %w", digest, err)
	}
	defer s.remove(tmp.key)
	switch {
	case size >= 0 && tmp.size != size:
		if tmp.size > size {
			return fmt.Errorf("put blob %s: more than the %d bytes announced: %w", digest, size, ErrDigest)
		}
		return fmt.Errorf("put blob %s: %d bytes, want %d: %w", digest, tmp.size, size, ErrDigest)
	case tmp.digest != digest:
		return fmt.Errorf("put blob %s: the bytes hash to %s: %w", digest, tmp.digest, ErrDigest)
	}
	if err := s.commit(ctx, tmp, digest); err != nil {
		return fmt.Errorf("put blob %s: %w", digest, err)
	}
	return nil
}

// PutUnknown implements Store.
func (s *S3) PutUnknown(ctx context.Context, r io.Reader, max int64) (string, int64, error) {
	if max < 0 {
		return "", 0, fmt.Errorf("put blob: limit %d: want 0 or more", max)
	}
	tmp, err := s.upload(ctx, r, -1, max+1)
	if err != nil {
		return "", 0, fmt.Errorf("put blob: %w", err)
	}
	defer s.remove(tmp.key)
	if tmp.size > max {
		return "", 0, fmt.Errorf("put blob: more than %d bytes: %w", max, ErrTooLarge)
	}
	if _, err := s.Stat(ctx, tmp.digest); err == nil {
		return tmp.digest, tmp.size, nil
	}
	if err := s.commit(ctx, tmp, tmp.digest); err != nil {
		return "", 0, fmt.Errorf("put blob %s: %w", tmp.digest, err)
	}
	return tmp.digest, tmp.size, nil
}

// tempObject is an upload under tmp/, hashed and counted.
type tempObject struct {
	key    string
	digest string
	size   int64
}

// counter hashes and counts what passes through it.
type counter struct {
	r io.Reader
	h io.Writer
	n int64
}

func (c *counter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.h.Write(p[:n])
	c.n += int64(n)
	return n, err
}

// upload streams r into a new temporary object: size bytes (-1:
// unknown), at most limit (-1: no limit). A reader longer than size is
// caught by reading one byte more after the upload: the count has it,
// the object does not.
func (s *S3) upload(ctx context.Context, r io.Reader, size, limit int64) (*tempObject, error) {
	var rnd [16]byte
	rand.Read(rnd[:])
	key := s.prefix + "tmp/" + hex.EncodeToString(rnd[:])
	h := sha256.New()
	src := io.Reader(ctxReader{ctx, r})
	c := &counter{r: src, h: h}
	switch {
	case size >= 0:
		c.r = io.LimitReader(src, size)
	case limit >= 0:
		c.r = io.LimitReader(src, limit)
	}
	_, err := s.c.PutObject(ctx, s.bucket, key, c, size, minio.PutObjectOptions{
		PartSize:             partSize,
		ContentType:          "application/octet-stream",
		DisableContentSha256: true,
	})
	if err != nil {
		s.remove(key)
		if ctx.Err() == nil && c.n < size { // a short body: minio-go's error is an unexpected EOF
			return &tempObject{size: c.n}, nil
		}
		return nil, err
	}
	if size >= 0 {
		var one [1]byte
		if n, _ := io.ReadFull(src, one[:]); n > 0 {
			return &tempObject{key: key, size: c.n + 1}, nil
		}
	}
	return &tempObject{key: key, digest: hex.EncodeToString(h.Sum(nil)), size: c.n}, nil
}

// commit copies a checked temporary object to the blob's key.
func (s *S3) commit(ctx context.Context, tmp *tempObject, digest string) error {
	dst := minio.CopyDestOptions{Bucket: s.bucket, Object: s.key(digest)}
	src := minio.CopySrcOptions{Bucket: s.bucket, Object: tmp.key}
	var err error
	if tmp.size <= maxCopy {
		_, err = s.c.CopyObject(ctx, dst, src)
	} else {
		_, err = s.c.ComposeObject(ctx, dst, src)
	}
	return err
}

// remove deletes an object, best effort (a leftover temporary object is
// swept at the next start).
func (s *S3) remove(key string) {
	if key == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.c.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{})
}

// Open implements Store; the ReadSeekCloser is a *minio.Object, whose
// Seek starts a new ranged GET.
func (s *S3) Open(ctx context.Context, digest string) (ReadSeekCloser, int64, error) {
	if err := checkDigest(digest); err != nil {
		return nil, 0, err
	}
	o, err := s.c.GetObject(ctx, s.bucket, s.key(digest), minio.GetObjectOptions{})
	if err != nil {
		return nil, 0, fmt.Errorf("open blob %s: %w", digest, err)
	}
	st, err := o.Stat()
	if err != nil {
		o.Close()
		if notFound(err) {
			return nil, 0, fmt.Errorf("open blob %s: %w", digest, ErrNotFound)
		}
		return nil, 0, fmt.Errorf("open blob %s: %w", digest, err)
	}
	return o, st.Size, nil
}

// Stat implements Store.
func (s *S3) Stat(ctx context.Context, digest string) (int64, error) {
	if err := checkDigest(digest); err != nil {
		return 0, err
	}
	st, err := s.c.StatObject(ctx, s.bucket, s.key(digest), minio.StatObjectOptions{})
	if notFound(err) {
		return 0, fmt.Errorf("stat blob %s: %w", digest, ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("stat blob %s: %w", digest, err)
	}
	return st.Size, nil
}

// Verify implements Store: it reads the object and hashes it. An object
// whose bytes do not match (written through a presigned PUT URL) is
// removed, so that the store lacks the blob again and a later upload can
// store it.
func (s *S3) Verify(ctx context.Context, digest string) error {
	r, _, err := s.Open(ctx, digest)
	if err != nil {
		return err
	}
	defer r.Close()
	h := sha256.New()
	if _, err := io.Copy(h, ctxReader{ctx, r}); err != nil {
		return fmt.Errorf("verify blob %s: %w", digest, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != digest {
		err := s.c.RemoveObject(ctx, s.bucket, s.key(digest), minio.RemoveObjectOptions{})
		if err != nil {
			return fmt.Errorf("verify blob %s: the bytes hash to %s (and removing them failed: %v): %w", digest, got, err, ErrDigest)
		}
		return fmt.Errorf("verify blob %s: the bytes hash to %s, removed: %w", digest, got, ErrDigest)
	}
	return nil
}

// PresignGet implements Store.
func (s *S3) PresignGet(ctx context.Context, digest string, ttl time.Duration) (string, error) {
	if err := checkPresign(digest, ttl); err != nil {
		return "", err
	}
	u, err := s.c.PresignedGetObject(ctx, s.bucket, s.key(digest), ttl.Round(time.Second), nil)
	if err != nil {
		return "", fmt.Errorf("presign get of blob %s: %w", digest, err)
	}
	return u.String(), nil
}

// PresignPut implements Store. S3 binds neither the digest nor the size
// to the URL: Verify checks what it stored.
func (s *S3) PresignPut(ctx context.Context, digest string, size int64, ttl time.Duration) (string, error) {
	if err := checkPresign(digest, ttl); err != nil {
		return "", err
	}
	if size < 0 {
		return "", fmt.Errorf("presign put of blob %s: size %d: want 0 or more", digest, size)
	}
	u, err := s.c.PresignedPutObject(ctx, s.bucket, s.key(digest), ttl.Round(time.Second))
	if err != nil {
		return "", fmt.Errorf("presign put of blob %s: %w", digest, err)
	}
	return u.String(), nil
}

func checkPresign(digest string, ttl time.Duration) error {
	if err := checkDigest(digest); err != nil {
		return err
	}
	if ttl < time.Second || ttl > MaxTTL {
		return fmt.Errorf("presign blob %s: ttl %v: want 1s to %v", digest, ttl, MaxTTL)
	}
	return nil
}

// Close implements Store.
func (s *S3) Close() error {
	s.tr.CloseIdleConnections()
	return nil
}
