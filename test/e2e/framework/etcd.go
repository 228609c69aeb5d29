package framework

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"time"
)

// etcd is one etcd member on loopback, storing data in a temporary directory.
type etcd struct {
	proc      *process
	clientURL string
}

func startEtcd(ctx context.Context, binDir, dir string) (*etcd, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	clientURL := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	proc, err := startProcess("etcd", filepath.Join(dir, "etcd.log"), []string{
		filepath.Join(binDir, "etcd"),
		"--name=kplug-e2e",
		"--data-dir=" + filepath.Join(dir, "etcd-data"),
		"--listen-client-urls=" + clientURL,
		"--advertise-client-urls=" + clientURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=kplug-e2e=" + peerURL,
		"--log-level=warn",
		"--unsafe-no-fsync", // throwaway data: fsync only slows tests down
	})
	if err != nil {
		return nil, err
	}
	e := &etcd{proc: proc, clientURL: clientURL}
	if err := waitReady(ctx, proc, 30*time.Second, e.healthy); err != nil {
		proc.stop(5 * time.Second)
		return nil, err
	}
	return e, nil
}

func (e *etcd) healthy(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.clientURL+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"health":"true"`) {
		return fmt.Errorf("etcd /health: %d %s", resp.StatusCode, body)
	}
	return nil
}
