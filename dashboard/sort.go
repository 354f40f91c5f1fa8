package dashboard

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
)

// SortBy names an order of rows.
type SortBy string

// The orders of Sort.
const (
	SortKey     SortBy = "key"     // by name
	SortWaiters SortBy = "waiters" // most waiters first
	SortAge     SortBy = "age"     // held longest first
	SortChurn   SortBy = "churn"   // most acquisitions per second first
)

// ParseSortBy reads the name of an order; the error matches dlock.ErrInvalid.
func ParseSortBy(s string) (SortBy, error) {
	switch by := SortBy(s); by {
	case SortKey, SortWaiters, SortAge, SortChurn:
		return by, nil
	}
	return "", fmt.Errorf("%w: unknown order %q (key, waiters, age or churn)", dlock.ErrInvalid, s)
}

// Sort orders rows by by, held locks before free ones, ties by key.
func Sort(rows []Row, by SortBy) {
	less := func(a, b Row) int {
		if a.Held != b.Held {
			if a.Held {
				return -1
			}
			return 1
		}
		switch by {
		case SortWaiters:
			if a.Waiters != b.Waiters {
				return b.Waiters - a.Waiters
			}
		case SortAge:
			if a.HeldFor != b.HeldFor {
				return cmpDesc(a.HeldFor, b.HeldFor)
			}
		case SortChurn:
			if a.Rate != b.Rate {
				return cmpDesc(a.Rate, b.Rate)
			}
		}
		return strings.Compare(a.Key, b.Key)
	}
	slices.SortFunc(rows, less)
}

func cmpDesc[T time.Duration | float64](a, b T) int {
	if a > b {
		return -1
	}
	return 1
}
