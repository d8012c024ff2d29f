package blobtest

import (
	"net"
	"os"
	"testing"
)

func TestParseProcAddr(t *testing.T) {
	for in, want := range map[string]string{
		"0100007F:1F90":                         "127.0.0.1:8080",
		"00000000:0016":                         "0.0.0.0:22",
		"00000000000000000000000001000000:0050": "[::1]:80",
		"0000000000000000FFFF00000100007F:0050": "[::ffff:127.0.0.1]:80",
	} {
		got, err := parseProcAddr(in)
		if err != nil || got.String() != want {
			t.Errorf("parseProcAddr(%q) = %v, %v, want %s", in, got, err, want)
		}
	}
}

func TestNotLoopback(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got, err := notLoopback(os.Getpid()); err != nil || len(got) != 0 {
		t.Errorf("notLoopback(a loopback listener) = %v, %v, want none", got, err)
	}
	// A listener on all addresses is caught without sending a packet.
	all, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	if got, err := notLoopback(os.Getpid()); err != nil || len(got) != 1 {
		t.Errorf("notLoopback(a 0.0.0.0 listener) = %v, %v, want it", got, err)
	}
}
