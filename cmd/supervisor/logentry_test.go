package main

import (
	"encoding/json"
	"strings"
)

// logEntry reads one line of the supervisor's own log in either -log-format: json (one
// object) or console ("TS  LEVEL  MSG  {fields}"). It returns the message and the fields
// (the console format has no msg field), ok false for a line that is neither, such as an
// app's "ID|APP | line".
func logEntry(line string) (msg string, fields map[string]any, ok bool) {
	if strings.HasPrefix(line, "{") {
		if json.Unmarshal([]byte(line), &fields) != nil {
			return "", nil, false
		}
		msg, _ = fields["msg"].(string)
		return msg, fields, true
	}
	parts := strings.SplitN(line, "  ", 3)
	if len(parts) != 3 || !strings.Contains(parts[0], "T") {
		return "", nil, false
	}
	rest := parts[2]
	fields = map[string]any{}
	if i := strings.Index(rest, "  {"); i >= 0 {
		if json.Unmarshal([]byte(rest[i+2:]), &fields) != nil {
			return "", nil, false
		}
		rest = rest[:i]
	}
	return strings.TrimSpace(rest), fields, true
}
