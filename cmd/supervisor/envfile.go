package main

import (
	"fmt"
	"os"
	"strings"
)

// parseEnvFile reads an environment file in the subset of systemd's EnvironmentFile=
// syntax that means the same to systemd and to us, so that `run -check -env-file PATH`
// judges what the unit of `startup -env-file PATH` will get: KEY=VALUE lines, blank lines
// and comments (# or ; first), a value optionally in single or double quotes (double
// quotes take \" and \\). What systemd reads otherwise (a trailing backslash continuing a
// line, a quote opened and not closed, text after a closing quote) is refused with its line
// number rather than guessed. A later KEY wins, as in systemd.
func parseEnvFile(text string) ([]string, error) {
	var env []string
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(strings.TrimSuffix(line, "\r"))
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		at := fmt.Sprintf("line %d", i+1)
		if strings.HasSuffix(line, `\`) {
			return nil, fmt.Errorf("%s: a trailing backslash continues the line in systemd: join the lines", at)
		}
		key, val, ok := strings.Cut(line, "=")
		key = strings.TrimSpace(key)
		if !ok || !validEnvName(key) {
			return nil, fmt.Errorf("%s: %q: want NAME=VALUE, NAME of letters, digits and '_' not starting with a digit", at, line)
		}
		val = strings.TrimSpace(val)
		if val != "" && (val[0] == '"' || val[0] == '\'') {
			q := val[0]
			var b strings.Builder
			j := 1
			for ; j < len(val) && val[j] != q; j++ {
				if q == '"' && val[j] == '\\' && j+1 < len(val) && (val[j+1] == '"' || val[j+1] == '\\') {
					j++
				}
				b.WriteByte(val[j])
			}
			if j >= len(val) {
				return nil, fmt.Errorf("%s: %s: the quote is not closed on this line", at, key)
			}
			if strings.TrimSpace(val[j+1:]) != "" {
				return nil, fmt.Errorf("%s: %s: text after the closing quote: quote the whole value", at, key)
			}
			val = b.String()
		}
		env = append(env, key+"="+val)
	}
	return env, nil
}

func validEnvName(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// readEnvFile is parseEnvFile of the file at path.
func readEnvFile(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("env-file: %w", err)
	}
	env, err := parseEnvFile(string(b))
	if err != nil {
		return nil, fmt.Errorf("env-file %s: %w", path, err)
	}
	return env, nil
}
