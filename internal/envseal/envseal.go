// Package envseal seals the values of step environment variables with the
// cluster env key, so that the scheduler's replicated state, its snapshots
// and the gateway's run records hold only names and ciphertext (SPEC.md:
// "Step environment values are write-only").
//
// The key is a Google Tink keyset of AES-256-GCM keys (KeyFile,
// env-key.json in the TLS directory, made by `scheduler tls init`), held
// by every scheduler member and by nothing else: not the data dir, the
// Raft log or a snapshot. Sealing and opening are Tink's AEAD; the
// associated data binds each ciphertext to its purpose, the step id and
// the variable name, so a ciphertext copied to another step, another
// variable or another use does not open. Rotation is Tink's: a new primary
// key seals from then on, and the older keys of the keyset still open
// what they sealed (Rotate).
package envseal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tink-crypto/tink-go/v2/aead"

	"github.com/rodon-compute/rodon/internal/atomicfile"
	"github.com/tink-crypto/tink-go/v2/insecurecleartextkeyset"
	"github.com/tink-crypto/tink-go/v2/keyset"
	"github.com/tink-crypto/tink-go/v2/tink"
)

// KeyFile is the name of the env key in a TLS directory.
const KeyFile = "env-key.json"

// Purpose says what a ciphertext is for; it is part of the associated
// data, so a ciphertext sealed for one purpose never opens for another.
type Purpose string

// Purposes.
const (
	// ForStep is a value in the replicated state: opened only for the
	// agent that runs the step.
	ForStep Purpose = "step"
	// ForSubmit is a value sealed ahead of a step's submission (POST
	// /v1/env/seal), for a caller that keeps it until then: the gateway's
	// run records. It opens only when a step of that id is submitted.
	ForSubmit Purpose = "submit"
	// ForSecretsTicket is a step's secrets delivery ticket in the
	// replicated state (cluster.StepSecrets), sealed under the name
	// TicketName: opened only for the agent that runs the step. Its own
	// purpose keeps it apart from every environment variable, whatever
	// the variable's name.
	ForSecretsTicket Purpose = "secrets-ticket"
)

// TicketName is the name a secrets ticket is sealed under.
const TicketName = "ticket"

// ErrOpen is returned by Open for a ciphertext that does not open: sealed
// with a key the keyset does not have, for another purpose, step or name,
// or changed.
var ErrOpen = errors.New("sealed value does not open with this cluster's env key")

// ErrExists is returned by Create for a file that exists already.
var ErrExists = errors.New("an env key already exists")

// Key is a loaded env key. It is safe for concurrent use.
type Key struct {
	handle *keyset.Handle
	aead   tink.AEAD
	// primary is the id of the key that seals, for logs.
	primary uint32
}

func newKey(h *keyset.Handle) (*Key, error) {
	a, err := aead.New(h)
	if err != nil {
		return nil, fmt.Errorf("env key: want an AEAD keyset: %w", err)
	}
	return &Key{handle: h, aead: a, primary: h.KeysetInfo().GetPrimaryKeyId()}, nil
}

// Generate returns a new key of one AES-256-GCM key, in memory only.
func Generate() (*Key, error) {
	h, err := keyset.NewHandle(aead.AES256GCMKeyTemplate())
	if err != nil {
		return nil, fmt.Errorf("generate env key: %w", err)
	}
	return newKey(h)
}

// Load reads the keyset file at path.
func Load(path string) (*Key, error) {
	h, err := readHandle(path)
	if err != nil {
		return nil, err
	}
	return newKey(h)
}

// PrimaryID is the Tink id of the key that seals (not secret).
func (k *Key) PrimaryID() uint32 { return k.primary }

func readHandle(path string) (*keyset.Handle, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read env key: %w", err)
	}
	h, err := insecurecleartextkeyset.Read(keyset.NewJSONReader(bytes.NewReader(b)))
	if err != nil {
		return nil, fmt.Errorf("env key %s: not a Tink JSON keyset: %w", path, err)
	}
	return h, nil
}

// Create writes a new keyset of one AES-256-GCM key to path, readable by
// its owner only. It refuses to replace an existing file (ErrExists): a
// new key cannot open what the old one sealed.
func Create(path string) error {
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("%w: %s", ErrExists, path)
	}
	h, err := keyset.NewHandle(aead.AES256GCMKeyTemplate())
	if err != nil {
		return fmt.Errorf("generate env key: %w", err)
	}
	return writeHandle(path, h)
}

// Rotate adds a new AES-256-GCM key to the keyset at path and makes it the
// primary: values are sealed with it from then on, and the older keys stay
// in the keyset to open what they sealed. It returns the new key's id.
func Rotate(path string) (uint32, error) {
	h, err := readHandle(path)
	if err != nil {
		return 0, err
	}
	m := keyset.NewManagerFromHandle(h)
	id, err := m.Add(aead.AES256GCMKeyTemplate())
	if err != nil {
		return 0, fmt.Errorf("add env key: %w", err)
	}
	if err := m.SetPrimary(id); err != nil {
		return 0, fmt.Errorf("make the new env key primary: %w", err)
	}
	if h, err = m.Handle(); err != nil {
		return 0, fmt.Errorf("rotate env key: %w", err)
	}
	if _, err := newKey(h); err != nil {
		return 0, err
	}
	return id, writeHandle(path, h)
}

// Export is the keyset in the file format of KeyFile (Tink's JSON
// keyset, in clear): for a joining member only, over mutual TLS.
func (k *Key) Export() ([]byte, error) {
	var buf bytes.Buffer
	if err := insecurecleartextkeyset.Write(k.handle, keyset.NewJSONWriter(&buf)); err != nil {
		return nil, fmt.Errorf("encode env key: %w", err)
	}
	return buf.Bytes(), nil
}

// Save checks that data is a keyset Export wrote, writes it to path
// (owner-only) and returns the key. Like Create it refuses to replace an
// existing file.
func Save(path string, data []byte) (*Key, error) {
	if _, err := os.Stat(path); err == nil {
		return nil, fmt.Errorf("%w: %s", ErrExists, path)
	}
	h, err := insecurecleartextkeyset.Read(keyset.NewJSONReader(bytes.NewReader(data)))
	if err != nil {
		return nil, fmt.Errorf("env key: not a Tink JSON keyset: %w", err)
	}
	k, err := newKey(h)
	if err != nil {
		return nil, err
	}
	return k, writeHandle(path, h)
}

// writeHandle writes h to a temporary file beside path (mode 0600) and
// renames it over path.
func writeHandle(path string, h *keyset.Handle) error {
	var buf bytes.Buffer
	if err := insecurecleartextkeyset.Write(h, keyset.NewJSONWriter(&buf)); err != nil {
		return fmt.Errorf("encode env key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write env key: %w", err)
	}
	if err := atomicfile.Write(path, buf.Bytes(), 0o600); err != nil {
		return fmt.Errorf("write env key: %w", err)
	}
	return nil
}

// associatedData binds a ciphertext to its purpose, step and variable: a
// JSON array, so no choice of strings makes two bindings equal.
func associatedData(p Purpose, step, name string) []byte {
	b, _ := json.Marshal([]string{"rodon-env-v1", string(p), step, name})
	return b
}

// Seal encrypts value for variable name of step, for purpose p.
func (k *Key) Seal(p Purpose, step, name, value string) ([]byte, error) {
	ct, err := k.aead.Encrypt([]byte(value), associatedData(p, step, name))
	if err != nil {
		return nil, fmt.Errorf("seal the value of %s: %w", name, err)
	}
	return ct, nil
}

// Open decrypts what Seal returned for the same purpose, step and name;
// anything else is ErrOpen.
func (k *Key) Open(p Purpose, step, name string, sealed []byte) (string, error) {
	pt, err := k.aead.Decrypt(sealed, associatedData(p, step, name))
	if err != nil {
		return "", fmt.Errorf("open the value of %s: %w", name, ErrOpen)
	}
	return string(pt), nil
}
