package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"os/user"
	"strconv"
	"time"

	"github.com/onehost/onehost/internal/ipc"
)

// Client sends commands to one supervisor's control socket. Every connection is checked
// before a request goes on it: whoever answers at the path must be this user or root
// (SO_PEERCRED), so that a listener another user put there can neither read our commands
// nor answer "stopped" for a supervisor that runs on.
type Client struct {
	socket string
	hc     *http.Client
}

// NewClient is a Client of the supervisor at socket.
func NewClient(socket string) *Client {
	return &Client{socket: socket, hc: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, "unix", socket)
			if err != nil {
				return nil, err
			}
			if err := ipc.CheckPeer(c.(*net.UnixConn)); err != nil {
				c.Close()
				return nil, peerRefusal(socket, err)
			}
			return c, nil
		},
	}}}
}

// peerRefusal says why the process at socket was not talked to, and what to do: root,
// meeting a supervisor of another user's, is told to ask as that user (root trusts no
// other user's socket: that user could have put any listener there); anyone else, that a
// stranger's program may be listening where the supervisor should be.
func peerRefusal(socket string, err error) error {
	var pe *ipc.PeerError
	if os.Geteuid() == 0 && errors.As(err, &pe) {
		name := strconv.FormatUint(uint64(pe.UID), 10)
		if u, lerr := user.LookupId(name); lerr == nil {
			name = u.Username
		}
		return fmt.Errorf("control socket %s: its process (pid %d) belongs to uid %d (user %s), not root: root does not take another user's answers (that user could put any program there); "+
			"run the command as that user: sudo -u %s supervisor ... -socket %s", socket, pe.PID, pe.UID, name, name, socket)
	}
	return fmt.Errorf("control socket: %w (is someone else's program listening there? remove %s and start the supervisor again)", err, socket)
}

// Do sends one request and returns the answer, which it has checked: a status of 300 or
// more is an *Error with the supervisor's message. The caller closes the body.
func (c *Client) Do(ctx context.Context, method, path string, q url.Values) (*http.Response, error) {
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://supervisor"+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set(VersionHeader, strconv.Itoa(Version))
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reach the supervisor at %s (is `supervisor run` running?): %w", c.socket, err)
	}
	if resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	e := &Error{Code: resp.StatusCode, Msg: resp.Status}
	var er ErrorReply
	if json.Unmarshal(body, &er) == nil && er.Error != "" {
		e.Msg = er.Error
	}
	e.Peer = resp.Header.Get(VersionHeader)
	return nil, e
}

// Call sends one request and returns the body of its successful answer (at most 16 MiB).
func (c *Client) Call(ctx context.Context, method, path string, q url.Values) ([]byte, error) {
	resp, err := c.Do(ctx, method, path, q)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, fmt.Errorf("read reply: %w", err)
	}
	return body, nil
}

// call sends one request and decodes its answer into v (nil: none).
func (c *Client) call(ctx context.Context, method, path string, q url.Values, v any) error {
	body, err := c.Call(ctx, method, path, q)
	if err != nil || v == nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("decode %s: %w", path, err)
	}
	return nil
}

// AppQuery is ?app=NAME, or nothing for "".
func AppQuery(app string) url.Values {
	q := url.Values{}
	if app != "" {
		q.Set("app", app)
	}
	return q
}

// Status is GET /status: every app ("" or "all") or the one named.
func (c *Client) Status(ctx context.Context, app string) (Status, error) {
	var st Status
	err := c.call(ctx, "GET", PathStatus, AppQuery(app), &st)
	return st, err
}

// StatusWithin is Status with a deadline of its own.
func (c *Client) StatusWithin(ctx context.Context, d time.Duration) (Status, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return c.Status(ctx, "")
}

// Describe is GET /describe: one app's details.
func (c *Client) Describe(ctx context.Context, app string) (Describe, error) {
	var d Describe
	err := c.call(ctx, "GET", PathDescribe, AppQuery(app), &d)
	return d, err
}

// Reload rolls the app's workers (every app's for ""); with updateEnv the configuration
// file's env is read again first. It returns what the supervisor noted.
func (c *Client) Reload(ctx context.Context, app string, updateEnv bool) ([]string, error) {
	return c.roll(ctx, PathReload, app, updateEnv)
}

// Restart restarts the app's workers (every app's for ""), as Reload.
func (c *Client) Restart(ctx context.Context, app string, updateEnv bool) ([]string, error) {
	return c.roll(ctx, PathRestart, app, updateEnv)
}

func (c *Client) roll(ctx context.Context, path, app string, updateEnv bool) ([]string, error) {
	q := AppQuery(app)
	if updateEnv {
		q.Set("update_env", "1")
	}
	var n Notes
	err := c.call(ctx, "POST", path, q, &n)
	return n.Notes, err
}

// Scale sets the app's workers to n: N, +N or -N.
func (c *Client) Scale(ctx context.Context, app, n string) error {
	q := AppQuery(app)
	q.Set("n", n)
	return c.call(ctx, "POST", PathScale, q, nil)
}

// Stop stops the app named ("all": every app), the supervisor running on; it returns once
// they stopped.
func (c *Client) Stop(ctx context.Context, app string) error {
	return c.call(ctx, "POST", PathStop, AppQuery(app), nil)
}

// StopSupervisor asks the whole supervisor to stop (it answers at once and stops on its
// own), and returns the pid of the process that took the request (0 if unknown), read from
// the very connection the request went on.
func (c *Client) StopSupervisor(ctx context.Context) (pid int, err error) {
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		if uc, ok := i.Conn.(*net.UnixConn); ok {
			if cred, err := ipc.PeerCred(uc); err == nil {
				pid = int(cred.Pid)
			}
		}
	}}
	err = c.call(httptrace.WithClientTrace(ctx, trace), "POST", PathStop, nil, nil)
	return pid, err
}

// Start starts a stopped app again (every stopped app for "" or "all"); revive brings a
// deleted one back too.
func (c *Client) Start(ctx context.Context, app string, revive bool) error {
	q := AppQuery(app)
	if revive {
		q.Set("revive", "1")
	}
	return c.call(ctx, "POST", PathStart, q, nil)
}

// Delete stops the app and removes it from every list.
func (c *Client) Delete(ctx context.Context, app string) error {
	return c.call(ctx, "POST", PathDelete, AppQuery(app), nil)
}

// Flush empties the app's log files (every app's and the supervisor's for ""), and
// returns their paths.
func (c *Client) Flush(ctx context.Context, app string) ([]string, error) {
	var f Flushed
	err := c.call(ctx, "POST", PathFlush, AppQuery(app), &f)
	return f.Files, err
}

// Save returns the running supervisor's dump.
func (c *Client) Save(ctx context.Context) (Dump, error) {
	var d Dump
	err := c.call(ctx, "POST", PathSave, nil, &d)
	return d, err
}

// Upgrade asks the supervisor to re-execute itself as binary ("" its own).
func (c *Client) Upgrade(ctx context.Context, binary string) error {
	q := url.Values{}
	if binary != "" {
		q.Set("binary", binary)
	}
	return c.call(ctx, "POST", PathUpgrade, q, nil)
}

// Drain takes the host out of its balancer (on) or back in (off).
func (c *Client) Drain(ctx context.Context, on bool) error {
	path := PathReady
	if on {
		path = PathDrain
	}
	return c.call(ctx, "POST", path, nil, nil)
}

// Logs is GET /logs with q: the stream of log lines, which the caller reads and closes.
func (c *Client) Logs(ctx context.Context, q url.Values) (io.ReadCloser, error) {
	resp, err := c.Do(ctx, "GET", PathLogs, q)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}
