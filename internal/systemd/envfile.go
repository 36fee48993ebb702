// Package systemd speaks to systemd and reads and writes what it reads: a service's
// notifications (notify.go: READY=1, STATUS=, the watchdog, the file descriptor store), the
// sockets it passes (fdstore.go: LISTEN_FDS, and LISTEN_PID set for a child by a
// re-executed shim, listenpid.go), the environment files of EnvironmentFile= (envfile.go,
// read exactly as systemd reads them, so that what `supervisor run -check -env-file`
// judges is what the unit gets), and the unit `supervisor startup` prints (unit.go).
package systemd

import (
	"fmt"
	"os"
	"strings"
	"unicode/utf8"
)

// ParseEnvFile reads an environment file as systemd's EnvironmentFile= does (its
// env-file.c state machine, systemd 252 to 257) and returns its assignments as KEY=VALUE,
// in order (a later KEY wins, as in systemd):
//
//   - a line ends at a newline or a carriage return; blank lines and lines whose first
//     non-blank character is # or ; are comments;
//   - KEY=VALUE, blanks around KEY and before VALUE dropped;
//   - unquoted, a value's trailing blanks are dropped, a backslash takes the next character
//     as it is (\\ is \, \# is #) and a backslash at the end of a line joins the next;
//   - in single quotes everything is as written, newlines too;
//   - in double quotes a backslash escapes ", \, ` and $ and joins lines, and stays as
//     written before any other character ("\n" is backslash, n);
//   - quoted and unquoted parts follow one another in one value (A="x"'y'z is xyz), but a
//     quote after unquoted text is a plain character (A=x"y" is x"y");
//   - no variable is expanded ($HOME stays $HOME).
//
// What systemd would read otherwise than a reader expects, or differently across its
// versions, is refused with its line number rather than guessed: a KEY that is not a
// shell variable name (systemd drops it, with a warning in the journal), a line without
// '=' (dropped), a quote not closed before the end of the file (systemd takes the rest
// of the file), a comment ending in a backslash (before 254 systemd continued the comment
// onto the next line; since, not), text that is not UTF-8 (systemd refuses the file).
func ParseEnvFile(text string) ([]string, error) {
	if !utf8.ValidString(text) {
		return nil, fmt.Errorf("not UTF-8 text (systemd refuses such a file)")
	}
	p := parser{text: text, line: 1}
	return p.parse()
}

// ReadEnvFile is ParseEnvFile of the file at path.
func ReadEnvFile(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("env-file: %w", err)
	}
	env, err := ParseEnvFile(string(b))
	if err != nil {
		return nil, fmt.Errorf("env-file %s: %w", path, err)
	}
	return env, nil
}

const (
	newline    = "\n\r"
	whitespace = " \t\n\r"
	// needEscape are the characters a backslash escapes in double quotes (systemd's
	// SHELL_NEED_ESCAPE).
	needEscape = "\"\\`$"
)

type parser struct {
	text string
	line int
	env  []string
}

func (p *parser) parse() ([]string, error) {
	t := p.text
	for i := 0; i < len(t); {
		// PRE_KEY: blanks, then a comment or a key.
		c := t[i]
		switch {
		case strings.IndexByte(whitespace, c) >= 0:
			if strings.IndexByte(newline, c) >= 0 {
				p.line++
			}
			i++
			continue
		case c == '#' || c == ';':
			// A backslash in a comment takes the next character with it; when that is the
			// line's end, systemd before 254 continued the comment onto the next line, and
			// later ones do not.
			for i++; i < len(t) && strings.IndexByte(newline, t[i]) < 0; i++ {
				if t[i] != '\\' {
					continue
				}
				if i+1 < len(t) && strings.IndexByte(newline, t[i+1]) >= 0 {
					return nil, p.errf("a comment ending in a backslash: systemd before 254 continues the comment onto the next line, later ones do not; remove the backslash")
				}
				i++
			}
			continue
		}
		var err error
		if i, err = p.assignment(i); err != nil {
			return nil, err
		}
	}
	return p.env, nil
}

// assignment reads KEY=VALUE from t[i:] up to the end of its line (past it, for quoted or
// continued values) and returns where the next line begins.
func (p *parser) assignment(i int) (int, error) {
	t := p.text
	start := p.line
	eq := i
	for eq < len(t) && t[eq] != '=' && strings.IndexByte(newline, t[eq]) < 0 {
		eq++
	}
	key := strings.TrimRight(t[i:eq], " \t")
	if eq == len(t) || t[eq] != '=' {
		return 0, p.errf("%q: want NAME=VALUE (systemd drops a line without '=')", key)
	}
	if !ValidEnvName(key) {
		return 0, p.errf("%q: want NAME=VALUE, NAME of letters, digits and '_' not starting with a digit (systemd drops other names)", key)
	}
	i = eq + 1
	var v strings.Builder
	// trim is where the value's trailing unquoted blanks begin, -1 when it ends otherwise.
	trim := -1
	for i < len(t) {
		c := t[i]
		switch {
		case strings.IndexByte(newline, c) >= 0:
			p.line++
			return p.push(key, v.String(), trim, i+1)
		case c == '\'' && (v.Len() == 0 || trim == -2):
			end := strings.IndexByte(t[i+1:], '\'')
			if end < 0 {
				return 0, p.errAt(start, "%s: the single quote is not closed (systemd would take the rest of the file as the value)", key)
			}
			q := t[i+1 : i+1+end]
			p.line += strings.Count(q, "\n") + strings.Count(q, "\r")
			v.WriteString(q)
			i += end + 2
			trim = -2 // after a quote: another quote opens again (PRE_VALUE)
			continue
		case c == '"' && (v.Len() == 0 || trim == -2):
			j := i + 1
			for ; j < len(t) && t[j] != '"'; j++ {
				if t[j] == '\\' && j+1 < len(t) {
					j++
					switch e := t[j]; {
					case strings.IndexByte(needEscape, e) >= 0:
						v.WriteByte(e)
					case e == '\n':
						p.line++ // a continued line: the newline goes
					default:
						if e == '\r' {
							p.line++
						}
						v.WriteByte('\\')
						v.WriteByte(e)
					}
					continue
				}
				if t[j] == '\n' || t[j] == '\r' {
					p.line++
				}
				v.WriteByte(t[j])
			}
			if j >= len(t) {
				return 0, p.errAt(start, "%s: the double quote is not closed (systemd would take the rest of the file as the value)", key)
			}
			i = j + 1
			trim = -2
			continue
		case c == ' ' || c == '\t':
			if v.Len() == 0 || trim == -2 { // blanks before the value, or between quoted parts
				i++
				continue
			}
			if trim < 0 {
				trim = v.Len()
			}
			v.WriteByte(c)
		case c == '\\':
			i++
			if i == len(t) {
				return p.push(key, v.String(), -1, i)
			}
			if strings.IndexByte(newline, t[i]) >= 0 {
				p.line++ // a continued line
			} else {
				v.WriteByte(t[i])
			}
			trim = -1
		default:
			v.WriteByte(c)
			trim = -1
		}
		i++
	}
	return p.push(key, v.String(), trim, i)
}

func (p *parser) push(key, value string, trim, next int) (int, error) {
	if trim >= 0 {
		value = value[:trim]
	}
	p.env = append(p.env, key+"="+value)
	return next, nil
}

func (p *parser) errf(format string, a ...any) error { return p.errAt(p.line, format, a...) }

func (p *parser) errAt(line int, format string, a ...any) error {
	return fmt.Errorf("line %d: "+format, append([]any{line}, a...)...)
}

// ValidEnvName reports whether s is a shell variable's name (an env file's key, an
// ecosystem file's env_NAME, startup's -env NAME).
func ValidEnvName(s string) bool {
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
