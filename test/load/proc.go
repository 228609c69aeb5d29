package load

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Watched is a process the harness measures: a proxy, or an apiserver for context.
type Watched struct {
	// Name names it in reports; PID finds it. PprofDir, if set, is where kplug-profiled
	// wrote the address of its pprof server (for goroutines and profiles).
	Name     string
	PID      func() int
	PprofDir string
}

// ProcSample is one measurement of a process.
type ProcSample struct {
	At  time.Duration
	RSS int64 // bytes
	// Anon is the part of RSS that is the process's own memory (heap, stacks); the rest
	// is mostly pages of its executable, shared with other processes and reclaimable.
	Anon int64
	CPU  float64 // seconds of user and system time, since it started
	// Wait is the seconds its threads have spent runnable but waiting for a CPU (the
	// kernel's schedstat), since they started: on a shared machine, the delay a hop
	// through another process adds.
	Wait       float64
	FDs        int
	Sockets    int // open sockets: connections, listeners
	Goroutines int // -1 without pprof
}

// Sampler measures processes at an interval, as series over time.
type Sampler struct {
	start time.Time
	mu    sync.Mutex
	procs []Watched
	data  map[string][]ProcSample
}

// NewSampler returns a sampler whose clock starts now.
func NewSampler(start time.Time, procs ...Watched) *Sampler {
	return &Sampler{start: start, procs: procs, data: map[string][]ProcSample{}}
}

// Run samples every interval until ctx ends.
func (s *Sampler) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		s.SampleOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// SampleOnce measures each process once (a process that is not running is skipped).
func (s *Sampler) SampleOnce(ctx context.Context) {
	for _, p := range s.procs {
		pid := p.PID()
		if pid <= 0 {
			continue
		}
		ps, err := Measure(ctx, pid, p.PprofDir)
		if err != nil {
			continue
		}
		ps.At = time.Since(s.start)
		s.mu.Lock()
		s.data[p.Name] = append(s.data[p.Name], ps)
		s.mu.Unlock()
	}
}

// Series returns the samples of the process name.
func (s *Sampler) Series(name string) []ProcSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ProcSample(nil), s.data[name]...)
}

// Measure reads a process's memory, CPU time, descriptors and (with pprof) goroutines.
func Measure(ctx context.Context, pid int, pprofDir string) (ProcSample, error) {
	ps := ProcSample{Goroutines: -1}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ps, err
	}
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			ps.RSS = kib(v)
		}
		if v, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			ps.Anon = kib(v)
		}
	}
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// After the command name in parentheses: fields 14 and 15 are utime and stime.
		if i := bytes.LastIndexByte(stat, ')'); i > 0 {
			f := strings.Fields(string(stat[i+1:]))
			if len(f) > 13 {
				u, _ := strconv.ParseFloat(f[11], 64)
				s, _ := strconv.ParseFloat(f[12], 64)
				ps.CPU = (u + s) / 100 // clock ticks; USER_HZ is 100 on Linux
			}
		}
	}
	ps.Wait = runQueueWait(pid)
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	ps.FDs = len(fds)
	for _, fd := range fds {
		if l, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), fd.Name())); err == nil && strings.HasPrefix(l, "socket:") {
			ps.Sockets++
		}
	}
	if pprofDir != "" {
		if n, err := goroutines(ctx, pprofDir, pid); err == nil {
			ps.Goroutines = n
		}
	}
	return ps, nil
}

// kib reads a /proc/PID/status value ("  1234 kB") in bytes.
func kib(v string) int64 {
	n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
	return n << 10
}

// PprofAddr is the address of the pprof server of kplug-profiled process pid.
func PprofAddr(dir string, pid int) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(pid)))
	return strings.TrimSpace(string(b)), err
}

func goroutines(ctx context.Context, dir string, pid int) (int, error) {
	addr, err := PprofAddr(dir, pid)
	if err != nil {
		return 0, err
	}
	body, err := fetch(ctx, "http://"+addr+"/debug/pprof/goroutine?debug=1", 10*time.Second)
	if err != nil {
		return 0, err
	}
	line, _, _ := bufio.NewReader(bytes.NewReader(body)).ReadLine()
	n, ok := strings.CutPrefix(string(line), "goroutine profile: total ")
	if !ok {
		return 0, fmt.Errorf("goroutine profile of %d: %q", pid, line)
	}
	return strconv.Atoi(n)
}

var pprofClient = &http.Client{Timeout: 2 * time.Minute}

func fetch(ctx context.Context, url string, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := pprofClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return io.ReadAll(io.LimitReader(resp.Body, 64<<20))
}

// Profile saves process pid's CPU profile over d (and its heap) into dir as
// <name>.cpu.pprof and <name>.heap.pprof.
func Profile(ctx context.Context, pprofDir string, pid int, d time.Duration, dir, name string) error {
	addr, err := PprofAddr(pprofDir, pid)
	if err != nil {
		return err
	}
	cpu, err := fetch(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, int(d.Seconds())), d+time.Minute)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".cpu.pprof"), cpu, 0o600); err != nil {
		return err
	}
	heap, err := fetch(ctx, "http://"+addr+"/debug/pprof/heap", time.Minute)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".heap.pprof"), heap, 0o600)
}

// runQueueWait sums the run-queue wait of pid's threads (/proc/PID/task/*/schedstat:
// on-CPU time, wait time, timeslices, in nanoseconds).
func runQueueWait(pid int) float64 {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	sum := 0.0
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) >= 2 {
			ns, _ := strconv.ParseFloat(f[1], 64)
			sum += ns / 1e9
		}
	}
	return sum
}
