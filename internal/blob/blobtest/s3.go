package blobtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/rodon-compute/rodon/internal/blob"
	"github.com/rodon-compute/rodon/internal/testenv"
)

// Weed is SeaweedFS's command, built by scripts/install-seaweedfs.
const Weed = "/opt/rodon/bin/weed"

// StartS3 starts a SeaweedFS server with its S3 gateway on loopback for
// the test (every listener on 127.0.0.1, data in a temp directory,
// telemetry off, an identity with a random access and secret key), waits
// until it stores objects, and returns the config of a bucket and prefix
// of its own. The server is stopped, and checked gone, at cleanup.
// Without weed the test skips, or fails under CI=true.
func StartS3(t testing.TB) blob.S3Config {
	t.Helper()
	if _, err := os.Stat(Weed); err != nil {
		testenv.Missing(t, "no SeaweedFS at "+Weed+" (scripts/install-seaweedfs builds it)")
	}
	dir := t.TempDir()
	cfg := blob.S3Config{
		Bucket:    "rodon-test",
		Region:    "us-east-1",
		AccessKey: "rodon" + randomHex(8),
		SecretKey: randomHex(20),
		Prefix:    "t" + randomHex(4),
	}
	identities, _ := json.Marshal(map[string]any{"identities": []any{map[string]any{
		"name":        "rodon",
		"credentials": []any{map[string]string{"accessKey": cfg.AccessKey, "secretKey": cfg.SecretKey}},
		"actions":     []string{"Admin", "Read", "List", "Tagging", "Write"},
	}}})
	s3conf := filepath.Join(dir, "s3.json")
	if err := os.WriteFile(s3conf, identities, 0o600); err != nil {
		t.Fatal(err)
	}
	port := func() string {
		_, p, _ := net.SplitHostPort(testenv.FreeAddr(t))
		return p
	}
	s3port := port()
	cfg.Endpoint = "127.0.0.1:" + s3port
	// weed makes a Unix socket /tmp/seaweedfs-SERVICE-grpc-PORT.sock for
	// each gRPC port, whatever its flags: removed at cleanup.
	var sockets []string
	grpc := func(service string) string {
		p := port()
		sockets = append(sockets, fmt.Sprintf("/tmp/seaweedfs-%s-grpc-%s.sock", service, p))
		return p
	}
	args := []string{"server",
		"-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-s3.ip.bind=127.0.0.1", "-metricsIp=127.0.0.1",
		"-dir=" + filepath.Join(dir, "data"),
		"-master.port=" + port(), "-master.port.grpc=" + grpc("master"),
		"-master.telemetry=false", "-master.telemetry.url=http://127.0.0.1:1/",
		"-master.volumeSizeLimitMB=512",
		"-volume.port=" + port(), "-volume.port.grpc=" + grpc("volume"), "-volume.max=0",
		"-volume.preStopSeconds=0",
		"-filer", "-filer.port=" + port(), "-filer.port.grpc=" + grpc("filer"),
		"-filer.localSocket=" + filepath.Join(dir, "filer.sock"),
		"-s3", "-s3.port=" + s3port, "-s3.port.grpc=" + grpc("s3"),
		"-s3.port.iceberg=0", "-s3.port.lance=0",
		"-s3.localSocket=" + filepath.Join(dir, "s3.sock"),
		"-s3.config=" + s3conf,
	}
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "weed.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(Weed, args...)
	// Its own directory and HOME: weed reads *.toml from both.
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", Weed, err)
	}
	// exited is closed once weed has exited and been reaped (waitErr set).
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		// Killed: its data is thrown away, and its graceful stop (SIGTERM)
		// takes more than 15s, mostly waiting.
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		logf.Close()
		for _, s := range sockets {
			if st, err := os.Lstat(s); err == nil && st.Mode().Type() == os.ModeSocket {
				os.Remove(s)
			}
		}
		if left := testenv.Processes(dir); len(left) > 0 {
			t.Errorf("SeaweedFS left processes: %v", left)
		}
	})
	if err := waitS3(cfg, exited, &waitErr); err != nil {
		log, _ := os.ReadFile(logf.Name())
		if len(log) > 8000 {
			log = log[len(log)-8000:]
		}
		t.Fatalf("SeaweedFS on %s: %v; its log ends:\n%s", cfg.Endpoint, err, log)
	}
	t.Logf("SeaweedFS S3 on %s ready in %v", cfg.Endpoint, time.Since(t0).Round(time.Millisecond))
	if bad, err := notLoopback(cmd.Process.Pid); err != nil || len(bad) > 0 {
		t.Fatalf("SeaweedFS listens outside loopback: %v (%v)", bad, err)
	}
	return cfg
}

// waitS3 waits until the server stores and reads back an object.
func waitS3(cfg blob.S3Config, exited <-chan struct{}, waitErr *error) error {
	tr, err := minio.DefaultTransport(false)
	if err != nil {
		return err
	}
	// Its connections do not outlive the wait (tests check for leaks).
	defer tr.CloseIdleConnections()
	c, err := minio.New(cfg.Endpoint, &minio.Options{
		Transport:    tr,
		Creds:        credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Region:       cfg.Region,
		BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		return err
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		err = probe(c, cfg.Bucket)
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("exited (%v) before it answered: %w", *waitErr, err)
		case <-time.After(250 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after 90s: %w", err)
		}
	}
}

func probe(c *minio.Client, bucket string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ok, err := c.BucketExists(ctx, bucket)
	if err != nil {
		return err
	}
	if !ok {
		err := c.MakeBucket(ctx, bucket, minio.MakeBucketOptions{})
		if code := minio.ToErrorResponse(err).Code; err != nil && code != "BucketAlreadyOwnedByYou" && code != "BucketAlreadyExists" {
			return err
		}
	}
	if _, err := c.PutObject(ctx, bucket, "ready", bytes.NewReader([]byte("ready")), 5, minio.PutObjectOptions{}); err != nil {
		return err
	}
	return c.RemoveObject(ctx, bucket, "ready", minio.RemoveObjectOptions{})
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
