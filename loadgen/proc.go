package loadgen

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/PID/stat's CPU times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// ProcCPU returns a probe of the CPU time (user + system) the process pid
// has used so far, read from /proc/PID/stat, to charge a server's CPU to
// the target whose turn it was. It fails at once if pid cannot be read.
func ProcCPU(pid int) (func() (time.Duration, error), error) {
	path := fmt.Sprintf("/proc/%d/stat", pid)
	probe := func() (time.Duration, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, err
		}
		return parseStatCPU(string(b))
	}
	if _, err := probe(); err != nil {
		return nil, fmt.Errorf("server process %d: %w", pid, err)
	}
	return probe, nil
}

// parseStatCPU reads utime and stime (fields 14 and 15) from a stat line.
// The command name (field 2) may hold spaces and parentheses, so fields
// are counted from the last ')'.
func parseStatCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("unexpected /proc stat line %q", stat)
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state); utime is field 14, stime field 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc stat line %q", stat)
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("unexpected CPU times in /proc stat line %q", stat)
	}
	return time.Duration(u+s) * time.Second / clockTicks, nil
}
