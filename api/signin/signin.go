// Package signin keeps the dashboard's browser sign-ins (the API and
// the dashboard call them dashboard sessions; inside the daemon a
// "session" is a shell session in a sandbox, and nothing else).
//
// A cookie cannot be kept from the other ports of localhost (cookies are
// scoped by host, not by port), so no cookie ever authorizes a request.
// Instead:
//
//  1. A holder of the token asks for a sign-in link: a random code, good
//     for one use within a minute, carried in the URL's fragment (which
//     browsers send to no server and put in no Referer).
//  2. The daemon's page reads the code, forgets the fragment and trades
//     the code for a session secret, which it keeps in the origin's own
//     storage: that is scoped by scheme, host and port, so no page on
//     another port can read it.
//  3. The page sends the secret as a bearer credential on every call and
//     stream. Nothing is sent by the browser on its own.
//
// Sessions expire (TTL after they were made), can be listed and revoked,
// and all end when the token rotates. The store keeps only a hash of each
// secret, in a file of mode 0600 in the daemon's root (see Disk), so that
// sessions survive a restart of the daemon but the file alone signs
// nobody in.
package signin

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"time"
)

// Bounds on what an outsider with the token (or with a session) can make
// the store keep.
const (
	// MaxCodes is how many sign-in codes may wait to be used at once.
	MaxCodes = 16
	// MaxSignIns is how many sessions are kept; past it the least
	// recently used one is ended.
	MaxSignIns = 32
	// CodeTTL is how long a sign-in code may wait to be used.
	CodeTTL = time.Minute
	// DefaultTTL is how long a session lasts after it was made.
	DefaultTTL = 24 * time.Hour
	// maxUserAgent bounds the browser name kept per session.
	maxUserAgent = 200
)

// SecretPrefix starts every session secret, so that it is recognisable
// (and can never be mistaken for the daemon's token).
const SecretPrefix = "acps_"

// Errors of Redeem.
var (
	ErrBadCode   = errors.New("the sign-in link is not valid: it was used already, has expired (links last a minute) or was never made; run agent-control-plane dashboard for a new one")
	ErrTooMany   = fmt.Errorf("%d sign-in links are waiting to be used; wait a minute", MaxCodes)
	ErrNotFound  = errors.New("no such session")
	errCorrupted = errors.New("unreadable sessions file")
)

// SignIn is one signed-in browser, as it is listed. The secret is not in
// it.
type SignIn struct {
	ID         string    `json:"id"`
	LinkID     string    `json:"linkId"` // the sign-in link it was made from
	CreatedAt  time.Time `json:"createdAt"`
	ExpiresAt  time.Time `json:"expiresAt"`
	LastUsedAt time.Time `json:"lastUsedAt"`
	UserAgent  string    `json:"userAgent,omitempty"`
}

// Link is a sign-in code, given once to the holder of the token.
type Link struct {
	ID        string // public: names the sessions made from it
	Code      string // secret: goes in the URL's fragment
	ExpiresAt time.Time
}

type entry struct {
	SignIn
	Hash string `json:"hash"` // sha256 of the secret, hex
}

type code struct {
	id      string
	expires time.Time
}

// Store holds the sessions. It is safe for concurrent use.
type Store struct {
	disk Disk // nil keeps sessions in memory only
	ttl  time.Duration
	now  func() time.Time

	mu       sync.Mutex
	key      []byte            // derived from the token: what the file is bound to
	sessions map[string]*entry // by secret hash
	codes    map[string]code   // by code hash
}

// Disk is where the store keeps its file: the daemon's root, whose own
// file layer opens without following links, reads only regular files and
// writes atomically with names it can prove at the next start.
type Disk interface {
	// LoadSignIns returns the file's content; an error wrapping
	// fs.ErrNotExist when there is none.
	LoadSignIns() ([]byte, error)
	// SaveSignIns replaces the file (mode 0600).
	SaveSignIns([]byte) error
}

// Options configure a Store.
type Options struct {
	// Disk keeps the sessions across restarts; nil: memory only.
	Disk Disk
	// TTL is how long a session lasts; default DefaultTTL.
	TTL time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Open returns the store for token, with the sessions its file holds for
// that token; sessions made under another token (before a rotation) are
// dropped. A file that cannot be read is reported and replaced: losing
// sessions only signs browsers out.
func Open(token string, o Options) (*Store, error) {
	s := &Store{disk: o.Disk, ttl: o.TTL, now: o.Now, sessions: map[string]*entry{}, codes: map[string]code{}}
	if s.ttl <= 0 {
		s.ttl = DefaultTTL
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.key = bind(token)
	if s.disk == nil {
		return s, nil
	}
	err := s.load()
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	return s, err
}

// bind derives the value that ties the file to a token, without keeping
// the token.
func bind(token string) []byte {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("agent-control-plane browser sessions v2"))
	return m.Sum(nil)
}

type file struct {
	Format   int      `json:"format"`
	Token    string   `json:"token"` // bind(token), hex
	Sessions []*entry `json:"sessions"`
}

func (s *Store) load() error {
	b, err := s.disk.LoadSignIns()
	if err != nil {
		return err
	}
	var fl file
	if json.Unmarshal(b, &fl) != nil || fl.Format != 1 {
		return fmt.Errorf("%w: it is replaced at the next sign-in", errCorrupted)
	}
	if !hmac.Equal([]byte(fl.Token), []byte(hex.EncodeToString(s.key))) {
		return nil // made under another token: a rotation ended them
	}
	now := s.now()
	for _, e := range fl.Sessions {
		if s.valid(e, now) && len(s.sessions) < MaxSignIns {
			s.sessions[e.Hash] = e
		}
	}
	return nil
}

// valid reports whether an entry read back is one the store could have
// written: a secret's hash, ids of its shape, made in the past and ending
// within a session's lifetime of that, not yet over. Anything else (a
// forged entry lasting for years, say) is dropped.
func (s *Store) valid(e *entry, now time.Time) bool {
	const skew = time.Minute // clocks move back a little
	return e != nil && isHex(e.Hash, 64) && isHex(e.ID, 16) && (e.LinkID == "" || isHex(e.LinkID, 16)) &&
		!e.CreatedAt.After(now.Add(skew)) && e.ExpiresAt.After(now) &&
		!e.ExpiresAt.After(e.CreatedAt.Add(s.ttl)) && len(e.UserAgent) <= maxUserAgent
}

func isHex(v string, n int) bool {
	if len(v) != n {
		return false
	}
	_, err := hex.DecodeString(v)
	return err == nil && strings.ToLower(v) == v
}

// save writes the sessions (called with mu held).
func (s *Store) save() error {
	if s.disk == nil {
		return nil
	}
	fl := file{Format: 1, Token: hex.EncodeToString(s.key), Sessions: make([]*entry, 0, len(s.sessions))}
	for _, e := range s.sessions {
		fl.Sessions = append(fl.Sessions, e)
	}
	slices.SortFunc(fl.Sessions, func(a, b *entry) int { return a.CreatedAt.Compare(b.CreatedAt) })
	b, err := json.Marshal(fl)
	if err != nil {
		return err
	}
	return s.disk.SaveSignIns(b)
}

// Rotate binds the store to a new token: every session ends.
func (s *Store) Rotate(token string) error {
	k := bind(token)
	s.mu.Lock()
	defer s.mu.Unlock()
	if hmac.Equal(k, s.key) {
		return nil
	}
	s.key = k
	clear(s.sessions)
	clear(s.codes)
	return s.save()
}

// NewLink makes a sign-in code, good for one use within CodeTTL.
func (s *Store) NewLink() (Link, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for h, c := range s.codes {
		if !now.Before(c.expires) {
			delete(s.codes, h)
		}
	}
	if len(s.codes) >= MaxCodes {
		return Link{}, ErrTooMany
	}
	l := Link{ID: randomHex(8), Code: randomText(32), ExpiresAt: now.Add(CodeTTL)}
	s.codes[hash(l.Code)] = code{id: l.ID, expires: l.ExpiresAt}
	return l, nil
}

// Redeem trades a code for a session: it returns the session and its
// secret, which is never shown again. A code works once.
func (s *Store) Redeem(c, userAgent string) (SignIn, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := hash(c)
	cd, ok := s.codes[h]
	now := s.now()
	if !ok || !now.Before(cd.expires) {
		return SignIn{}, "", ErrBadCode
	}
	delete(s.codes, h)
	if len(s.sessions) >= MaxSignIns {
		var oldest *entry
		for _, e := range s.sessions {
			if oldest == nil || e.LastUsedAt.Before(oldest.LastUsedAt) {
				oldest = e
			}
		}
		delete(s.sessions, oldest.Hash)
	}
	secret := SecretPrefix + randomText(32)
	e := &entry{SignIn: SignIn{
		ID: randomHex(8), LinkID: cd.id, CreatedAt: now, ExpiresAt: now.Add(s.ttl), LastUsedAt: now,
		UserAgent: clip(userAgent, maxUserAgent),
	}, Hash: hash(secret)}
	s.sessions[e.Hash] = e
	if err := s.save(); err != nil {
		// Still good for this daemon's life; a restart signs it out.
		return e.SignIn, secret, fmt.Errorf("session kept in memory only: %w", err)
	}
	return e.SignIn, secret, nil
}

// Check returns the session a presented secret belongs to, if it is one
// and has not expired.
func (s *Store) Check(secret string) (SignIn, bool) {
	if !strings.HasPrefix(secret, SecretPrefix) {
		return SignIn{}, false
	}
	h := hash(secret)
	s.mu.Lock()
	defer s.mu.Unlock()
	// Looked up by the hash of what was presented: the map's timing
	// says nothing of a secret.
	e, ok := s.sessions[h]
	if !ok {
		return SignIn{}, false
	}
	now := s.now()
	if !now.Before(e.ExpiresAt) {
		delete(s.sessions, h)
		_ = s.save()
		return SignIn{}, false
	}
	e.LastUsedAt = now
	return e.SignIn, true
}

// List returns the live sessions, oldest first.
func (s *Store) List() []SignIn {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	out := make([]SignIn, 0, len(s.sessions))
	for _, e := range s.sessions {
		if now.Before(e.ExpiresAt) {
			out = append(out, e.SignIn)
		}
	}
	slices.SortFunc(out, func(a, b SignIn) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out
}

// Revoke ends the session with this id (ErrNotFound when there is none).
func (s *Store) Revoke(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for h, e := range s.sessions {
		if e.ID == id {
			delete(s.sessions, h)
			return s.save()
		}
	}
	return ErrNotFound
}

// RevokeAll ends every session and every waiting link.
func (s *Store) RevokeAll() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.sessions)
	clear(s.codes)
	return s.save()
}

func hash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// randomText is n random bytes, base64url without padding: safe in a URL
// fragment and in a header.
func randomText(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// clip keeps at most n bytes of printable ASCII.
func clip(s string, n int) string {
	var b strings.Builder
	for i := 0; i < len(s) && b.Len() < n; i++ {
		if c := s[i]; c >= ' ' && c < 0x7f {
			b.WriteByte(c)
		}
	}
	return b.String()
}
