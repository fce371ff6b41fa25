package cli

import (
	"regexp"
	"strconv"
	"strings"
)

// helpExitCodes are the exit-code rows of a hook's --help: code by reason, or by the row
// that is not a reason, which failedRow matches.
func helpExitCodes(help, failedRow string) map[string]int {
	row := regexp.MustCompile(`^  (\d+)\s+(\S+|` + failedRow + `)  `)
	got := map[string]int{}
	for _, line := range strings.Split(help, "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			code, _ := strconv.Atoi(m[1])
			got[m[2]] = code
		}
	}
	return got
}
