// Package blob is the content store of workspaces: immutable blobs named
// by the SHA-256 of their bytes (hex), behind one small interface with two
// implementations: Local, an embedded store in a directory that serves
// its own signed URLs (the default: nothing to set up), and S3, any
// S3-compatible object store through minio-go with real S3 presigned
// URLs.
//
// Only the scheduler holds a Store (and so a store credential). Nodes and
// callers of the gateway get expiring presigned URLs, one per blob and
// method, and nothing else: a URL for GET reads that blob, a URL for PUT
// writes bytes that must hash to its digest (Local checks while it
// streams; for S3 the scheduler checks a blob before it commits a
// revision naming it, see Verify).
//
// Streaming everywhere: no method holds a whole blob in memory.
//
// Open builds the store a --blob-store URL names (URLForms). Package
// blobtest holds the conformance suite every Store passes and StartS3, a
// SeaweedFS server on loopback for tests against real S3.
package blob

import (
	"context"
	"errors"
	"io"
	"time"
)

// ErrNotFound is what a read of an absent blob wraps.
var ErrNotFound = errors.New("blob not found")

// ErrDigest is what a write wraps whose bytes do not hash to the digest
// it was for, or whose digest is not 64 lower-case hex digits.
var ErrDigest = errors.New("blob digest mismatch")

// ErrTooLarge is what PutUnknown wraps when r holds more than max bytes.
var ErrTooLarge = errors.New("blob too large")

// Store is a content-addressed blob store. It is safe for concurrent use.
type Store interface {
	// Put stores the bytes of r, which must hash to digest (ErrDigest
	// otherwise, and nothing is stored) and be size bytes long (-1:
	// unknown). A blob already present is not written again.
	Put(ctx context.Context, digest string, r io.Reader, size int64) error
	// PutUnknown stores the bytes of r, whose digest is not known yet,
	// and returns it with the size: the gateway's streamed uploads. At
	// most max bytes are read; more is an ErrTooLarge and nothing is
	// stored.
	PutUnknown(ctx context.Context, r io.Reader, max int64) (digest string, size int64, err error)
	// Open returns the blob for reading (and seeking, for Range), with its
	// size. The caller closes it.
	Open(ctx context.Context, digest string) (ReadSeekCloser, int64, error)
	// Stat returns the blob's size, or ErrNotFound.
	Stat(ctx context.Context, digest string) (int64, error)
	// PresignGet and PresignPut return a URL that reads, or writes, the
	// blob digest until ttl has passed, and nothing else. A PUT URL
	// accepts only bytes of that digest and size.
	PresignGet(ctx context.Context, digest string, ttl time.Duration) (string, error)
	PresignPut(ctx context.Context, digest string, size int64, ttl time.Duration) (string, error)
	// Verify reads the blob and reports ErrDigest if its bytes do not
	// hash to digest. Local blobs were checked when written, so Local's
	// Verify only checks presence; S3's reads the object.
	Verify(ctx context.Context, digest string) error
	// Close releases what the store holds.
	Close() error
}

// ReadSeekCloser is an open blob.
type ReadSeekCloser interface {
	io.ReadSeeker
	io.Closer
}

// MaxTTL bounds every presigned URL's life (S3 allows at most 7 days).
const MaxTTL = 24 * time.Hour
