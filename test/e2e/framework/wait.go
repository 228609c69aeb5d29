package framework

import (
	"context"
	"fmt"
	"net"
	"time"
)

// waitReady polls check until it succeeds, the process exits, or timeout passes.
func waitReady(ctx context.Context, p *process, timeout time.Duration, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		attempt, cancelAttempt := context.WithTimeout(ctx, 2*time.Second)
		last = check(attempt)
		cancelAttempt()
		if last == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%w before it became ready; last lines of %s:\n%s", p.exitError(), p.logPath, p.tail(30))
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %v: %w; last lines of %s:\n%s", p.name, timeout, last, p.logPath, p.tail(30))
		case <-tick.C:
		}
	}
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
