package execcache

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// processStart reads field 22 of /proc/<pid>/stat: the start time in clock ticks since
// boot, which differs for a later process with the same pid.
func processStart(pid int) (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", err
	}
	return statStartTime(string(b))
}

// statStartTime parses a /proc/<pid>/stat line. The command name (field 2) is in
// parentheses and may itself hold spaces and parentheses, so fields are counted from the
// last ')'.
func statStartTime(stat string) (string, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return "", errors.New("execcache: malformed /proc stat: no command name")
	}
	fields := strings.Fields(stat[i+1:]) // fields 3 (state) onwards
	const startTime = 22 - 3
	if len(fields) <= startTime {
		return "", fmt.Errorf("execcache: malformed /proc stat: %d fields after the command name", len(fields))
	}
	if _, err := strconv.ParseUint(fields[startTime], 10, 64); err != nil {
		return "", fmt.Errorf("execcache: malformed /proc stat start time: %w", err)
	}
	return fields[startTime], nil
}
