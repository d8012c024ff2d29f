// Package secretbox is the key hierarchy of the secrets of tenants
// (docs/design/tenants.md, "Secrets"): envelope encryption with Google
// Tink AEAD keysets of AES-256-GCM keys, in the shape of internal/envseal.
//
// The root key is a Tink keyset in a JSON file (--root-key-file, mode
// 0600), held by the gateways and nothing else: never the replicated
// store, its snapshots, a data dir or a backup. Each tenant has a data
// keyset, kept in the store wrapped: encrypted by the root keyset with
// Tink's encrypted-keyset format (keyset.Handle.WriteWithAssociatedData),
// the tenant id bound as associated data, so a wrapped data key copied to
// another tenant does not open. A secret value is sealed by its tenant's
// data keyset with associated data binding the purpose, the tenant, the
// secret's name and its version.
//
// Root rotation is Tink's, in three steps that keep every value readable
// throughout: Rotate adds a new primary key to the root keyset (the file
// is rewritten with both), Rewrap re-encrypts each tenant's data keyset
// with the new primary, and WithoutOld drops every other key (the file is
// rewritten with the new key only). After that a copy of the old file
// opens no wrapped data key.
package secretbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/tink-crypto/tink-go/v2/aead"
	"github.com/tink-crypto/tink-go/v2/insecurecleartextkeyset"
	"github.com/tink-crypto/tink-go/v2/keyset"
	"github.com/tink-crypto/tink-go/v2/tink"

	"github.com/rodon-compute/rodon/internal/atomicfile"
)

// ErrOpen is returned for a wrapped data key or a sealed value that does
// not open: made with a key the keyset does not have, for another tenant,
// name or version, or changed.
var ErrOpen = errors.New("does not open with this key")

// ErrExists is returned by CreateRoot for a file that exists already.
var ErrExists = errors.New("a root key file exists already")

// Root is a loaded root keyset. It is safe for concurrent use.
type Root struct {
	handle *keyset.Handle
	aead   tink.AEAD
}

func newRoot(h *keyset.Handle) (*Root, error) {
	a, err := aead.New(h)
	if err != nil {
		return nil, fmt.Errorf("root key: want an AEAD keyset: %w", err)
	}
	return &Root{handle: h, aead: a}, nil
}

// GenerateRoot returns a new root keyset of one AES-256-GCM key, in
// memory only.
func GenerateRoot() (*Root, error) {
	h, err := keyset.NewHandle(aead.AES256GCMKeyTemplate())
	if err != nil {
		return nil, fmt.Errorf("generate root key: %w", err)
	}
	return newRoot(h)
}

// LoadRoot reads the root keyset file at path (Tink's JSON keyset).
func LoadRoot(path string) (*Root, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read root key: %w", err)
	}
	h, err := insecurecleartextkeyset.Read(keyset.NewJSONReader(bytes.NewReader(b)))
	if err != nil {
		return nil, fmt.Errorf("root key %s: not a Tink JSON keyset: %w", path, err)
	}
	return newRoot(h)
}

// WriteRoot writes r to path, readable by its owner only: to a temporary
// file beside it, renamed over it (a gateway rereading the file sees the
// old keyset or the new, never a part).
func WriteRoot(path string, r *Root) error {
	var buf bytes.Buffer
	if err := insecurecleartextkeyset.Write(r.handle, keyset.NewJSONWriter(&buf)); err != nil {
		return fmt.Errorf("encode root key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("write root key: %w", err)
	}
	if err := atomicfile.Write(path, buf.Bytes(), 0o600); err != nil {
		return fmt.Errorf("write root key: %w", err)
	}
	return nil
}

// CreateRoot writes a new root keyset to path. It refuses to replace an
// existing file (ErrExists): a new root key opens none of the data keys
// the old one wrapped.
func CreateRoot(path string) error {
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("%w: %s", ErrExists, path)
	}
	r, err := GenerateRoot()
	if err != nil {
		return err
	}
	return WriteRoot(path, r)
}

// PrimaryID is the Tink id of the key that wraps (not secret).
func (r *Root) PrimaryID() uint32 { return r.handle.KeysetInfo().GetPrimaryKeyId() }

// Keys is the number of keys of the keyset.
func (r *Root) Keys() int { return r.handle.Len() }

// KeyIDs are the Tink ids of the keyset's keys (not secret).
func (r *Root) KeyIDs() []uint32 {
	var ids []uint32
	for _, k := range r.handle.KeysetInfo().GetKeyInfo() {
		ids = append(ids, k.GetKeyId())
	}
	return ids
}

// Rotate returns r with a new AES-256-GCM key added as its primary: data
// keys are wrapped with it from then on, and r's keys still unwrap what
// they wrapped. r itself is unchanged.
func (r *Root) Rotate() (*Root, error) {
	m := keyset.NewManagerFromHandle(r.handle)
	id, err := m.Add(aead.AES256GCMKeyTemplate())
	if err != nil {
		return nil, fmt.Errorf("add root key: %w", err)
	}
	if err := m.SetPrimary(id); err != nil {
		return nil, fmt.Errorf("make the new root key primary: %w", err)
	}
	h, err := m.Handle()
	if err != nil {
		return nil, fmt.Errorf("rotate root key: %w", err)
	}
	return newRoot(h)
}

// WithoutOld returns r with its primary key only: the last step of a
// rotation, once every data key is wrapped with the primary (Rewrap).
func (r *Root) WithoutOld() (*Root, error) {
	primary := r.PrimaryID()
	m := keyset.NewManagerFromHandle(r.handle)
	for _, k := range r.handle.KeysetInfo().GetKeyInfo() {
		if k.GetKeyId() == primary {
			continue
		}
		if err := m.Delete(k.GetKeyId()); err != nil {
			return nil, fmt.Errorf("drop root key %d: %w", k.GetKeyId(), err)
		}
	}
	h, err := m.Handle()
	if err != nil {
		return nil, fmt.Errorf("drop old root keys: %w", err)
	}
	return newRoot(h)
}

// wrapAD is the associated data of tenant's wrapped data key: a JSON
// array, so no choice of strings makes two bindings equal.
func wrapAD(tenant string) []byte {
	b, _ := json.Marshal([]string{"rodon-data-key-v1", tenant})
	return b
}

// sealAD binds a sealed value to its tenant, name and version.
func sealAD(tenant, name string, version int) []byte {
	b, _ := json.Marshal([]string{"rodon-secret-v1", tenant, name, strconv.Itoa(version)})
	return b
}

// DataKey is a tenant's opened data keyset. It is safe for concurrent
// use.
type DataKey struct {
	handle *keyset.Handle
	aead   tink.AEAD
}

// NewDataKey makes a data keyset of one AES-256-GCM key for tenant and
// returns it wrapped by root (Tink's binary encrypted keyset): the bytes
// to store.
func NewDataKey(root *Root, tenant string) ([]byte, error) {
	h, err := keyset.NewHandle(aead.AES256GCMKeyTemplate())
	if err != nil {
		return nil, fmt.Errorf("generate data key: %w", err)
	}
	return wrap(root, tenant, h)
}

func wrap(root *Root, tenant string, h *keyset.Handle) ([]byte, error) {
	var buf bytes.Buffer
	if err := h.WriteWithAssociatedData(keyset.NewBinaryWriter(&buf), root.aead, wrapAD(tenant)); err != nil {
		return nil, fmt.Errorf("wrap the data key of %s: %w", tenant, err)
	}
	return buf.Bytes(), nil
}

// OpenDataKey unwraps tenant's data key with root; a key wrapped for
// another tenant, by a root key root does not have, or changed is
// ErrOpen.
func OpenDataKey(root *Root, tenant string, wrapped []byte) (*DataKey, error) {
	h, err := keyset.ReadWithAssociatedData(keyset.NewBinaryReader(bytes.NewReader(wrapped)), root.aead, wrapAD(tenant))
	if err != nil {
		return nil, fmt.Errorf("unwrap the data key of %s: %w", tenant, ErrOpen)
	}
	a, err := aead.New(h)
	if err != nil {
		return nil, fmt.Errorf("data key of %s: want an AEAD keyset: %w", tenant, err)
	}
	return &DataKey{handle: h, aead: a}, nil
}

// Rewrap unwraps tenant's data key with root and wraps it again with
// root's primary key: the same data keyset, so every value it sealed
// still opens.
func Rewrap(root *Root, tenant string, wrapped []byte) ([]byte, error) {
	k, err := OpenDataKey(root, tenant, wrapped)
	if err != nil {
		return nil, err
	}
	return wrap(root, tenant, k.handle)
}

// Seal encrypts value as version version of tenant's secret name.
func (k *DataKey) Seal(tenant, name string, version int, value string) ([]byte, error) {
	ct, err := k.aead.Encrypt([]byte(value), sealAD(tenant, name, version))
	if err != nil {
		return nil, fmt.Errorf("seal secret %s: %w", name, err)
	}
	return ct, nil
}

// Open decrypts what Seal returned for the same tenant, name and version;
// anything else is ErrOpen.
func (k *DataKey) Open(tenant, name string, version int, sealed []byte) (string, error) {
	pt, err := k.aead.Decrypt(sealed, sealAD(tenant, name, version))
	if err != nil {
		return "", fmt.Errorf("open secret %s version %d: %w", name, version, ErrOpen)
	}
	return string(pt), nil
}
