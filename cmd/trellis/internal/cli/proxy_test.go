package cli_test

import (
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis/cmd/trellis/internal/cli"
)

// proxy forwards TCP connections to a server until it is taken down, which
// drops every connection and refuses new ones, as a database that went
// away does; up brings it back on the same address.
type proxy struct {
	t      *testing.T
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newProxy(t *testing.T, target string) *proxy {
	p := &proxy{t: t, target: target}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(func() { p.down(); p.wg.Wait() })
	return p
}

func (p *proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", p.target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			p.wg.Go(func() { _, _ = io.Copy(s, c); _ = s.Close() })
			p.wg.Go(func() { _, _ = io.Copy(c, s); _ = c.Close() })
		}
	})
}

func (p *proxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

func (p *proxy) up() {
	var ln net.Listener
	require.Eventually(p.t, func() bool {
		var err error
		ln, err = net.Listen("tcp", p.addr)
		return err == nil
	}, 10*time.Second, 10*time.Millisecond, "cannot listen on %s again", p.addr)
	p.serve(ln)
}

// A running worker whose database goes away says so, keeps running, and
// says when it is back.
func TestWorkerOutlivesTheDatabaseGoingAway(t *testing.T) {
	t.Parallel()
	e := setup(t)
	cfg, err := pgconn.ParseConfig(e.url)
	require.NoError(t, err)
	if len(cfg.Host) == 0 || cfg.Host[0] == '/' {
		t.Skip("the test server is not reached over TCP")
	}
	e.ok("migrate")
	p := newProxy(t, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	url := "postgres://" + cfg.User + "@" + p.addr + "/" + cfg.Database + "?sslmode=disable&connect_timeout=2"
	var logs syncBuffer
	stop := e.background(&logs, "worker", "--drain", "1", "--url", url)
	e.waitLog(&logs, `msg="worker started"`)
	p.down()
	e.waitLog(&logs, "the database does not answer; the workers keep retrying")
	p.up()
	e.waitLog(&logs, "the database answers again")
	require.Equal(t, cli.ExitOK, stop(), logs.String())
}
