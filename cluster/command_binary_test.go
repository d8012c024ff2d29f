package cluster

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// batchableCommands is one command of every batchable type.
func batchableCommands() []Command {
	return []Command{
		SubmitStep{}, PlaceStep{}, StepPhase{}, StepExit{}, StepEvents{}, RequestCancel{}, ConfirmCancel{},
		Heartbeat{}, StepUnplaceable{}, StepsWaiting{}, StartTimeout{}, Expire{}, MarkNodeLost{},
	}
}

// fill sets every field reachable from v to a value that is not zero
// (slices and maps get two elements, pointers a filled value), seeded by
// n so that sibling fields differ.
func fill(v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2026, 12, 6, 12, *n%60, 7, 123456789+*n, time.UTC)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), n)
			}
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), n)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			fill(v.Index(i), n)
		}
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		for range 2 {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			fill(k, n)
			fill(e, n)
			v.SetMapIndex(k, e)
		}
	case reflect.String:
		v.SetString(fmt.Sprintf("v%d-é\x00\"", *n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(-*n))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(*n))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(*n) + 0.25)
	case reflect.Array:
		for i := range v.Len() {
			fill(v.Index(i), n)
		}
	case reflect.Interface:
		// JSON and MessagePack would differ in the dynamic type; no
		// batchable command has one (the test fails if one is added).
		panic(fmt.Sprintf("fill: interface field of %v", v.Type()))
	}
}

// TestBinaryItemRoundTrip: every batchable command, every field set,
// decodes from its binary item to what it was, and to what the same
// command decodes to from JSON (so that an entry's format changes
// nothing the FSM sees). The zero command does too.
func TestBinaryItemRoundTrip(t *testing.T) {
	for _, c := range batchableCommands() {
		for _, filled := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/filled=%v", c.CommandType(), filled), func(t *testing.T) {
				v := reflect.New(reflect.TypeOf(c))
				if filled {
					n := 0
					fill(v.Elem(), &n)
				}
				want := v.Elem().Interface().(Command)
				item, err := NewBinaryItem(want)
				if err != nil {
					t.Fatalf("NewBinaryItem(%T) = %v", want, err)
				}
				if item.Type != c.CommandType() {
					t.Errorf("NewBinaryItem(%T).Type = %s, want %s", want, item.Type, c.CommandType())
				}
				got := reflect.New(reflect.TypeOf(c))
				if err := DecodeBinary(item.Data, got.Interface()); err != nil {
					t.Fatalf("DecodeBinary(%T) = %v", want, err)
				}
				fromJSON := reflect.New(reflect.TypeOf(c))
				j, err := json.Marshal(want)
				if err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(j, fromJSON.Interface()); err != nil {
					t.Fatal(err)
				}
				// Empty and nil collections are alike to the FSM (JSON
				// itself drops empty ones under omitempty).
				opt := cmpopts.EquateEmpty()
				if diff := cmp.Diff(want, got.Elem().Interface(), opt); diff != "" {
					t.Errorf("binary round trip of %T (-want +got):\n%s", want, diff)
				}
				if diff := cmp.Diff(fromJSON.Elem().Interface(), got.Elem().Interface(), opt); diff != "" {
					t.Errorf("%T from binary differs from JSON (-json +binary):\n%s", want, diff)
				}
			})
		}
	}
}

func TestBinaryBatchRoundTrip(t *testing.T) {
	var items []BatchItem
	for _, c := range batchableCommands() {
		item, err := NewBinaryItem(c)
		if err != nil {
			t.Fatal(err)
		}
		items = append(items, item)
	}
	for _, n := range []int{0, 1, len(items)} {
		entry := EncodeBinaryBatch(items[:n])
		if entry[0] != byte(CmdBinaryBatch) {
			t.Fatalf("EncodeBinaryBatch() type byte = %d, want %d", entry[0], CmdBinaryBatch)
		}
		b, err := DecodeBinaryBatch(entry[1:])
		if err != nil {
			t.Fatalf("DecodeBinaryBatch(%d items) = %v", n, err)
		}
		if diff := cmp.Diff(items[:n], b.Items, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("DecodeBinaryBatch(%d items) (-want +got):\n%s", n, diff)
		}
	}
	if _, err := NewBinaryItem(SetMember{ID: "m1"}); err == nil {
		t.Errorf("NewBinaryItem(SetMember) = nil error, want one")
	}
}

// FuzzDecodeBinaryBatch: whatever the bytes, decoding an entry and its
// items returns an error or values, never panics (the FSM turns an error
// into its panic on a corrupt log); and what decodes encodes back to an
// entry that decodes to the same items.
func FuzzDecodeBinaryBatch(f *testing.F) {
	var items []BatchItem
	for _, c := range batchableCommands() {
		v := reflect.New(reflect.TypeOf(c))
		n := 0
		fill(v.Elem(), &n)
		item, err := NewBinaryItem(v.Elem().Interface().(Command))
		if err != nil {
			f.Fatal(err)
		}
		items = append(items, item)
	}
	f.Add(EncodeBinaryBatch(items)[1:])
	f.Add(EncodeBinaryBatch(items[:1])[1:])
	f.Add([]byte{0x90})
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte(`{"items":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := DecodeBinaryBatch(data)
		if err != nil {
			return
		}
		for _, it := range b.Items {
			for _, c := range batchableCommands() {
				_ = DecodeBinary(it.Data, reflect.New(reflect.TypeOf(c)).Interface())
			}
		}
		again, err := DecodeBinaryBatch(EncodeBinaryBatch(b.Items)[1:])
		if err != nil {
			t.Fatalf("DecodeBinaryBatch(EncodeBinaryBatch(%x)) = %v", data, err)
		}
		if diff := cmp.Diff(b.Items, again.Items, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("re-encoded batch differs (-first +again):\n%s", diff)
		}
	})
}
