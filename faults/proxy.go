package faults

import (
	"errors"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/durachk/durachk/internal/ports"
)

// Why durachk has its own proxy rather than toxiproxy embedded: toxiproxy's
// toxics pick their victims per connection from the global random source (its
// -seed does nothing), so a "30 % of replies lost" fault can be neither per reply
// nor reproduced from durachk's seed; and its timeout toxic accepts new
// connections during a partition. This proxy does exactly the fault kinds the
// plans need, every random choice comes from the link's seeded generator, and it
// counts what it applied.

// Counters are what a proxy really did.
type Counters struct {
	Connections    int64 `json:"connections"`
	Refused        int64 `json:"refused"`         // connections refused during a partition
	Cut            int64 `json:"cut"`             // live connections cut by a partition or a reset
	RepliesDropped int64 `json:"replies_dropped"` // reply chunks dropped (the connection is then cut)
	BytesDelayed   int64 `json:"bytes_delayed"`
	Blackholed     int64 `json:"blackholed"` // connections accepted and held until the blackhole ended
	Stalled        int64 `json:"stalled"`    // chunks of live connections held by a blackhole
}

// Proxy forwards TCP connections from a loopback port to an upstream address,
// applying the link's fault windows. Safe for concurrent use; Close ends it and
// every connection through it.
type Proxy struct {
	Link     *Link
	Upstream string
	// Also are further links whose partitions and blackholes apply to this
	// proxy too: the links of the nodes at either end of a replication link.
	Also []*Link
	// Listen is the address to listen on; "" is a port on 127.0.0.1 claimed
	// for the proxy's life (ports.Claim): the proxy gives it up while its
	// link is down, and nothing else may take it meanwhile.
	Listen string
	// OnFault, if set, is told of every fault applied (kind, count).
	OnFault func(kind string)
	Now     func() time.Time

	addr    string
	release func() // of the claim on the port, at Close
	mu      sync.Mutex
	ln      net.Listener
	conns   map[net.Conn]bool
	closed  bool
	down    bool
	c       Counters
	stop    chan struct{}
	wg      sync.WaitGroup
}

// Start listens on a free loopback port.
func (p *Proxy) Start() error {
	if p.Now == nil {
		p.Now = time.Now
	}
	p.release = func() {}
	ln, err := p.listen()
	if err != nil {
		return err
	}
	p.ln, p.addr, p.conns, p.stop = ln, ln.Addr().String(), map[net.Conn]bool{}, make(chan struct{})
	p.wg.Add(2)
	go p.accept(ln)
	go p.watch()
	return nil
}

// listen listens on Listen, or on a port it claims (setting p.release).
func (p *Proxy) listen() (net.Listener, error) {
	if p.Listen != "" {
		return net.Listen("tcp", p.Listen)
	}
	var err error
	// A claimed port may still be bound by a process that is not durachk's
	// between the claim's check and the listen: claim another.
	for try := 0; try < 10; try++ {
		port, release, cerr := ports.Claim("127.0.0.1")
		if cerr != nil {
			return nil, cerr
		}
		ln, lerr := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if lerr == nil {
			p.release = release
			return ln, nil
		}
		release()
		err = lerr
	}
	return nil, err
}

// Addr is host:port to give clients instead of the upstream.
func (p *Proxy) Addr() string { return p.addr }

// Counters returns what the proxy applied so far.
func (p *Proxy) Counters() Counters {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.c
}

func (p *Proxy) fault(kind string, add func(c *Counters)) {
	p.mu.Lock()
	add(&p.c)
	p.mu.Unlock()
	if p.OnFault != nil {
		p.OnFault(kind)
	}
}

// watch applies partitions: when a down window starts it closes the listener
// (new connections are refused) and cuts every live connection; when it ends
// it listens again on the same port, which its claim kept from every other
// durachk process meanwhile (Listen).
func (p *Proxy) watch() {
	defer p.wg.Done()
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		down := p.isDown(p.Now())
		p.mu.Lock()
		changed := down != p.down
		p.down = down
		p.mu.Unlock()
		if !changed {
			continue
		}
		if down {
			p.mu.Lock()
			ln := p.ln
			p.ln = nil
			var cut []net.Conn
			for c := range p.conns {
				cut = append(cut, c)
			}
			p.mu.Unlock()
			if ln != nil {
				ln.Close()
			}
			for _, c := range cut {
				c.Close()
			}
			p.fault("partition", func(c *Counters) { c.Cut += int64(len(cut)) })
			continue
		}
		for i := 0; i < 100; i++ {
			ln, err := net.Listen("tcp", p.addr)
			if err == nil {
				p.mu.Lock()
				if p.closed {
					ln.Close()
				} else {
					p.ln = ln
					p.wg.Add(1)
					go p.accept(ln)
				}
				p.mu.Unlock()
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func (p *Proxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			return
		}
		p.mu.Lock()
		if p.closed || p.down {
			p.mu.Unlock()
			c.Close()
			p.fault("refused", func(c *Counters) { c.Refused++ })
			continue
		}
		p.conns[c] = true
		p.c.Connections++
		p.mu.Unlock()
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) forget(cs ...net.Conn) {
	p.mu.Lock()
	for _, c := range cs {
		delete(p.conns, c)
		c.Close()
	}
	p.mu.Unlock()
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	if p.blackhole(p.Now()) {
		// Nothing answers until the blackhole ends; then the connection goes
		// through, as a SYN retransmitted after a partition heals does. What the
		// client sent meanwhile waits in its socket.
		p.fault("blackhole", func(c *Counters) { c.Blackholed++ })
		for p.blackhole(p.Now()) {
			select {
			case <-p.stop:
				p.forget(client)
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	up, err := net.DialTimeout("tcp", p.UpstreamAddr(), 5*time.Second)
	if err != nil {
		p.forget(client)
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		up.Close()
		p.forget(client)
		return
	}
	p.conns[up] = true
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	last := &lastRequest{}
	go func() { p.pipe(up, client, nil, last); done <- struct{}{} }()
	go func() { p.pipe(client, up, last, nil); done <- struct{}{} }()
	<-done
	p.forget(client, up)
	<-done
}

// lastRequest is the latest request chunk of a connection, for Match.
type lastRequest struct {
	mu  sync.Mutex
	buf []byte
}

func (l *lastRequest) set(b []byte) {
	l.mu.Lock()
	l.buf = append(l.buf[:0], b[:min(len(b), 4096)]...)
	l.mu.Unlock()
}

func (l *lastRequest) get() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]byte(nil), l.buf...)
}

// pipe copies src to dst. On the request direction (record != nil) it remembers
// the latest request; on the reply direction (replyTo != nil) it may drop a
// chunk (then cut the connection: the request was applied, its reply is lost)
// or delay it.
func (p *Proxy) pipe(dst, src net.Conn, replyTo, record *lastRequest) {
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			now := p.Now()
			if record != nil {
				record.set(buf[:n])
			}
			if replyTo != nil && p.Link.LoseReply(now, replyTo.get()) {
				p.fault("reply_lost", func(c *Counters) { c.RepliesDropped++; c.Cut++ })
				return
			}
			if !p.stall() {
				return
			}
			if d := p.Link.Delay(now); d > 0 {
				p.fault("latency", func(c *Counters) { c.BytesDelayed += int64(n) })
				time.Sleep(d)
			}
			if p.Link.Reset(now) {
				p.fault("reset", func(c *Counters) { c.Cut++ })
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) also() []*Link {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.Also
}

func (p *Proxy) isDown(now time.Time) bool {
	if p.Link.Down(now) {
		return true
	}
	for _, l := range p.also() {
		if l.Down(now) {
			return true
		}
	}
	return false
}

func (p *Proxy) blackhole(now time.Time) bool {
	if p.Link.Blackhole(now) {
		return true
	}
	for _, l := range p.also() {
		if l.Blackhole(now) {
			return true
		}
	}
	return false
}

// stall holds a chunk while the link is blackholed, as a network that drops
// every packet until it heals (TCP retransmits, nothing arrives): live
// connections hang too, not only new ones. It reports false once the proxy
// closes.
func (p *Proxy) stall() bool {
	counted := false
	for p.blackhole(p.Now()) {
		if !counted {
			counted = true
			p.fault("blackhole", func(c *Counters) { c.Stalled++ })
		}
		select {
		case <-p.stop:
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
	return true
}

// UpstreamAddr is where new connections go now.
func (p *Proxy) UpstreamAddr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.Upstream
}

// SetUpstream points new connections at addr (a virtual address that follows
// the primary) and cuts the live ones, as a failover of the address does; also
// replaces Also (the links of the new upstream's node).
func (p *Proxy) SetUpstream(addr string, also ...*Link) {
	p.mu.Lock()
	p.Upstream, p.Also = addr, also
	var cs []net.Conn
	for c := range p.conns {
		cs = append(cs, c)
	}
	p.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

// CutAll closes every live connection at once, dropping the bytes the proxy
// holds or delays for them, as when the host at one end fails: what was on
// the wire never arrives. New connections are served as before.
func (p *Proxy) CutAll() {
	p.mu.Lock()
	var cs []net.Conn
	for c := range p.conns {
		cs = append(cs, c)
	}
	p.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
	if len(cs) > 0 {
		p.fault("cut", func(c *Counters) { c.Cut += int64(len(cs)) })
	}
}

// Close stops the proxy and cuts every connection. Idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	ln := p.ln
	var cs []net.Conn
	for c := range p.conns {
		cs = append(cs, c)
	}
	p.mu.Unlock()
	close(p.stop)
	if ln != nil {
		ln.Close()
	}
	for _, c := range cs {
		c.Close()
	}
	p.wg.Wait()
	if p.release != nil {
		p.release()
	}
	return nil
}
