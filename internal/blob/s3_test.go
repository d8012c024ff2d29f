package blob_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/rodon-compute/rodon/internal/blob"
	"github.com/rodon-compute/rodon/internal/blob/blobtest"
	"github.com/rodon-compute/rodon/internal/testenv"
)

// TestS3 runs the suite against SeaweedFS on loopback, the presigned URLs
// with a plain http.Client, then opens the store by URL.
func TestS3(t *testing.T) {
	cfg := blobtest.StartS3(t)
	t.Run("Conformance", func(t *testing.T) { s3Conformance(t, cfg) })
	t.Run("Open", func(t *testing.T) { s3Open(t, cfg) })
}

func s3Conformance(t *testing.T, cfg blob.S3Config) {
	s, err := blob.NewS3(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	blobtest.Conformance(t, s, blobtest.Options{})

	// Every Put went through a temporary object: none is left.
	c, err := minio.New(cfg.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""), Region: cfg.Region})
	if err != nil {
		t.Fatal(err)
	}
	for o := range c.ListObjects(t.Context(), cfg.Bucket, minio.ListObjectsOptions{Prefix: cfg.Prefix + "/", Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		if !strings.HasPrefix(o.Key, cfg.Prefix+"/blobs/") {
			t.Errorf("object %s left outside blobs/", o.Key)
		}
	}
}

// TestOpenLocal opens the local kinds of --blob-store URL.
func TestOpenLocal(t *testing.T) {
	logger := testenv.Logger(t)
	data := t.TempDir()
	s, err := blob.Open(t.Context(), "local", data, "http://127.0.0.1:1", logger)
	if err != nil {
		t.Fatal(err)
	}
	if l, ok := s.(*blob.Local); !ok || l.Dir() != filepath.Join(data, "blobs") {
		t.Errorf("Open(local) = %T in %v, want a Local in DATA/blobs", s, s)
	}
	if st, err := os.Stat(filepath.Join(data, "blob-key")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("Open(local) key file: %v, %v", st, err)
	}
	shared := t.TempDir()
	if _, err := blob.Open(t.Context(), "local://"+shared, "", "http://127.0.0.1:1", logger); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(shared, ".key")); err != nil {
		t.Errorf("Open(local:///PATH) made no PATH/.key: %v", err)
	}
	if _, err := blob.Open(t.Context(), "local", data, "", logger); err == nil || !strings.Contains(err.Error(), "base URL") {
		t.Errorf("Open(local) without a base URL = %v, want an error naming it", err)
	}
}

// s3Open opens the S3 store by URL, credentials from the environment and
// from a file.
func s3Open(t *testing.T, cfg blob.S3Config) {
	logger := testenv.Logger(t)
	data := t.TempDir()
	var s blob.Store
	var err error
	url := "s3://" + cfg.Bucket + "/" + cfg.Prefix + "-open?endpoint=" + cfg.Endpoint + "&secure=false"
	t.Setenv("AWS_ACCESS_KEY_ID", cfg.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", cfg.SecretKey)
	s, err = blob.Open(t.Context(), url, data, "", logger)
	if err != nil {
		t.Fatalf("Open(%s) = %v", url, err)
	}
	b, d := blobtest.Random(t, 10)
	if err := s.Put(t.Context(), d, bytes.NewReader(b), 10); err != nil {
		t.Fatalf("Put in the store of %s = %v", url, err)
	}
	creds := filepath.Join(t.TempDir(), "s3")
	os.WriteFile(creds, []byte(cfg.AccessKey+"\n"+cfg.SecretKey+"\n"), 0o600)
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	s, err = blob.Open(t.Context(), url+"&credentials-file="+creds, data, "", logger)
	if err != nil {
		t.Fatalf("Open(%s with a credentials file) = %v", url, err)
	}
	if _, err := s.Stat(t.Context(), d); err != nil {
		t.Errorf("Stat in the store of %s = %v", url, err)
	}
	os.WriteFile(creds, []byte(cfg.AccessKey+"\nwrong\n"), 0o600)
	if _, err := blob.Open(t.Context(), url+"&credentials-file="+creds, data, "", logger); err == nil {
		t.Error("Open with a wrong secret key succeeded")
	} else if strings.Contains(err.Error(), cfg.AccessKey) {
		t.Errorf("Open with a wrong secret key = %v: the error shows the access key", err)
	}
}
