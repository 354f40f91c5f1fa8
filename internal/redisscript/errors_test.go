package redisscript

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/dlock-go/dlock"
)

// serverReply is an error reply as go-redis returns it.
type serverReply string

func (e serverReply) Error() string { return string(e) }
func (serverReply) RedisError()     {}

func TestMapErrClassifiesServerReplies(t *testing.T) {
	for _, c := range []struct {
		err       error
		want      error
		refused   bool
		wantInMsg string
	}{
		{serverReply("LOADING Redis is loading the dataset in memory"), dlock.ErrUnavailable, false, "LOADING"},
		{serverReply("TRYAGAIN Multiple keys request during rehashing of slot"), dlock.ErrUnavailable, false, "TRYAGAIN"},
		// A redirection that outlived the client's retries: a slot changing owner.
		{serverReply("MOVED 4809 127.0.0.1:42115"), dlock.ErrUnavailable, false, "MOVED 4809"},
		{serverReply("ASK 4809 127.0.0.1:42115"), dlock.ErrUnavailable, false, "ASK 4809"},
		{serverReply("OOM command not allowed when used memory > 'maxmemory'. script: 1f2e, on @user_script:3."), dlock.ErrUnavailable, false, "OOM"},
		{serverReply("NOPERM this user has no permissions to run the 'evalsha' command"), dlock.ErrRefused, true, "NOPERM"},
		{serverReply("ERR unknown command 'fcall'"), dlock.ErrRefused, true, "ERR unknown"},
		{serverReply("WRONGTYPE Operation against a key holding the wrong kind of value"), dlock.ErrConflict, false, "not a dlock lock"},
		{serverReply("DLOCKCONFLICT the hash has no owner field"), dlock.ErrConflict, false, "no owner field"},
		{io.EOF, dlock.ErrUnavailable, false, "EOF"},
	} {
		got := MapErr("redislock", c.err)
		if !errors.Is(got, c.want) || errors.Is(got, dlock.ErrRefused) != c.refused {
			t.Errorf("MapErr(%q) = %v, want %v (refused %v)", c.err, got, c.want, c.refused)
		}
		if msg := fmt.Sprint(got); !strings.Contains(msg, c.wantInMsg) || strings.Contains(msg, "script:") {
			t.Errorf("MapErr(%q) says %q, want it to name %q and not the script", c.err, msg, c.wantInMsg)
		}
	}
	for _, err := range []error{nil, context.Canceled, context.DeadlineExceeded} {
		if got := MapErr("redislock", err); got != err {
			t.Errorf("MapErr(%v) = %v, want it unchanged", err, got)
		}
	}
}
