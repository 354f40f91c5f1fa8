package driver

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// RefPrefix starts every lease reference: the name and version of its format.
const RefPrefix = "dlock1."

// maxRefLen bounds the references ParseRef reads.
const maxRefLen = 8 << 10

// Ref is what a lease reference names (see dlock.Lease.Detach): one holding,
// and what is needed to renew it as its first holder did. String writes it as
// a reference; ParseRef reads one.
type Ref struct {
	Backend, Kind string        // the DriverInfo of the Client that took it
	Key, Owner    string        // the holding
	Token         uint64        // its fencing token
	TTL           time.Duration // the TTL it is renewed with
	Delay         time.Duration // its lock-delay; 0 for none
	Fixed         bool          // taken without renewal
}

// refJSON is a Ref as a reference's contents carry it.
type refJSON struct {
	Backend string `json:"b"`
	Kind    string `json:"k"`
	Key     string `json:"key"`
	Owner   string `json:"o"`
	Token   uint64 `json:"t"`
	TTL     int64  `json:"ttl"`          // ms
	Delay   int64  `json:"d,omitempty"`  // ms
	Fixed   bool   `json:"fx,omitempty"` // taken without renewal
}

// String writes r as a lease reference: RefPrefix and r's fields, as JSON in
// unpadded URL-safe base64. It is printable, and safe in a URL, a file name
// or a shell word.
func (r Ref) String() string {
	b, _ := json.Marshal(refJSON{r.Backend, r.Kind, r.Key, r.Owner, r.Token, r.TTL.Milliseconds(), r.Delay.Milliseconds(), r.Fixed})
	return RefPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// ParseRef reads a lease reference that Ref.String wrote. Anything else (a
// truncated or altered reference, a field missing or out of range) returns an
// error matching ErrInvalid.
func ParseRef(s string) (Ref, error) {
	if len(s) > maxRefLen {
		return Ref{}, invalidf("lease reference of %d bytes, more than %d", len(s), maxRefLen)
	}
	body, ok := strings.CutPrefix(s, RefPrefix)
	if !ok {
		return Ref{}, invalidf("not a lease reference (one starts with %q)", RefPrefix)
	}
	b, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil {
		return Ref{}, invalidf("lease reference: %v (truncated or altered?)", err)
	}
	var j refJSON
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil || dec.More() {
		return Ref{}, invalidf("lease reference: unreadable contents (truncated or altered?)")
	}
	r := Ref{Backend: j.Backend, Kind: j.Kind, Key: j.Key, Owner: j.Owner, Token: j.Token,
		TTL: time.Duration(j.TTL) * time.Millisecond, Delay: time.Duration(j.Delay) * time.Millisecond, Fixed: j.Fixed}
	switch {
	case (DriverInfo{Backend: r.Backend, Kind: r.Kind}).Check() != nil:
		return Ref{}, invalidf("lease reference without a valid backend and kind")
	case r.Owner == "" || len(r.Owner) > MaxOwnerLen+len(OwnerSep)+64:
		return Ref{}, invalidf("lease reference with an invalid owner")
	case r.Token == 0:
		return Ref{}, invalidf("lease reference without a fencing token")
	case j.TTL <= 0 || j.Delay < 0:
		return Ref{}, invalidf("lease reference with an invalid TTL or lock-delay")
	}
	if err := ValidateKey(r.Key); err != nil {
		return Ref{}, fmt.Errorf("lease reference: %w", err)
	}
	return r, nil
}
