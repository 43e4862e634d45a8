// ironlock.hpp: a header-only C++17 wrapper over the C API of libironlock (ironlock.h).
//
// RAII owners for the manager and the lock (a held lock is released when its owner goes out of
// scope), std::chrono durations, and exceptions (ironlock::error) that carry the status, the
// message and the per-node report of the call that failed. Written by hand over the stable C
// ABI: it only uses functions of that ABI, so a program built with it keeps working with every
// later libironlock.so.0. Link with -lironlock (or the CMake target ironlock::ironlock).
//
//   ironlock::manager m(ironlock::config{}.node("redis://127.0.0.1:7001")
//                                          .node("redis://127.0.0.1:7002")
//                                          .node("redis://127.0.0.1:7003"));
//   {
//       ironlock::lock lock = m.acquire({"invoice:42"}, std::chrono::seconds(10));
//       // ... keep the work shorter than lock.validity() ...
//       lock.finish();  // releases; throws ironlock::error (IRONLOCK_LOST) if the lock was lost
//   }                   // (a lock not finished is released here, without throwing)
//
// Leader elections: `m.campaign(name, value, ttl)` waits in line and gives an
// ironlock::leadership (resigned when it goes out of scope), `m.leader(name)` says who leads,
// `m.observe(name)` follows the changes.
//
// Thread safety is the C API's: a manager may be shared by threads; a lock or a leadership may
// be used by several threads but destroyed by one; an observer is used by one thread at a time.
#ifndef IRONLOCK_HPP
#define IRONLOCK_HPP

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ironlock.h"

namespace ironlock {

/// One node's part in the last round of a failed call (URL with any password as `***`).
struct node_report {
    std::string url;
    std::string vote;                 ///< for, against, error, timeout, not_eligible, pending
    std::optional<std::string> error; ///< the node's error text, when it had one
};

/// The failure of a call: its status (IRONLOCK_CONTENDED, IRONLOCK_LOST, …), the message
/// (`what()`), and the per-node report of the round that failed (empty when no node was asked).
class error : public std::runtime_error {
public:
    error(ironlock_status status, const std::string &message, std::vector<node_report> report,
          std::chrono::microseconds elapsed, std::uint32_t rounds)
        : std::runtime_error(message), status_(status), report_(std::move(report)),
          elapsed_(elapsed), rounds_(rounds) {}

    ironlock_status status() const noexcept { return status_; }
    /// The status's name: "CONTENDED", "UNAVAILABLE", "LOST", "INVALID_ARGUMENT", …
    const char *code() const noexcept { return ironlock_status_str(status_); }
    const std::vector<node_report> &report() const noexcept { return report_; }
    std::chrono::microseconds elapsed() const noexcept { return elapsed_; }
    std::uint32_t rounds() const noexcept { return rounds_; }

private:
    ironlock_status status_;
    std::vector<node_report> report_;
    std::chrono::microseconds elapsed_;
    std::uint32_t rounds_;
};

namespace detail {

/// This thread's last report, copied.
inline std::vector<node_report> last_report() {
    std::vector<node_report> out;
    const std::size_t n = ironlock_last_report_node_count();
    for (std::size_t i = 0; i < n; ++i) {
        const char *url = ironlock_last_report_node_url(i);
        const char *vote = ironlock_last_report_node_vote(i);
        const char *err = ironlock_last_report_node_error(i);
        out.push_back(node_report{url ? url : "", vote ? vote : "",
                                  err ? std::optional<std::string>(err) : std::nullopt});
    }
    return out;
}

/// Throws ironlock::error for a failed status (with this thread's message and report).
inline void check(ironlock_status status) {
    if (status == IRONLOCK_OK) return;
    throw error(status, ironlock_last_error(), last_report(),
                std::chrono::microseconds(ironlock_last_report_elapsed_us()),
                ironlock_last_report_rounds());
}

/// Throws ironlock::error (IRONLOCK_INVALID_ARGUMENT) with `message`, which names the argument.
[[noreturn]] inline void invalid(const std::string &message) {
    throw error(IRONLOCK_INVALID_ARGUMENT, message, {}, std::chrono::microseconds(0), 0);
}

/// `d` in whole milliseconds for the argument `name` of a C call, which reads 0 as "the
/// default" or "no deadline": a negative, NaN, infinite or too large duration, or one above 0
/// but under 1 ms, is refused rather than passed on as something else.
template <class Rep, class Period>
std::uint64_t millis(const char *name, std::chrono::duration<Rep, Period> d) {
    const double ms = std::chrono::duration<double, std::milli>(d).count();
    if (!(ms >= 0.0)) invalid(std::string(name) + ": must be a duration of 0 or more");
    if (ms >= 18446744073709551615.0) invalid(std::string(name) + ": too large");
    if (ms > 0.0 && ms < 1.0) invalid(std::string(name) + ": must be 0 or at least 1 ms");
    return static_cast<std::uint64_t>(ms);
}

/// `s` for the argument `name` of a C call: a NUL byte inside would cut the string there (and
/// name something else), so it is refused.
inline const char *c_str(const std::string &name, const std::string &s) {
    if (s.find('\0') != std::string::npos) invalid(name + ": contains a NUL byte");
    return s.c_str();
}

struct config_deleter {
    void operator()(ironlock_config *c) const noexcept { ironlock_config_free(c); }
};
struct manager_deleter {
    void operator()(ironlock_manager *m) const noexcept { ironlock_manager_free(m); }
};
struct lock_deleter {
    void operator()(ironlock_lock *l) const noexcept { ironlock_lock_free(l); }
};
struct opts_deleter {
    void operator()(ironlock_acquire_opts *o) const noexcept { ironlock_acquire_opts_free(o); }
};
struct leadership_deleter {
    void operator()(ironlock_leadership *l) const noexcept { ironlock_leadership_free(l); }
};
struct leader_info_deleter {
    void operator()(ironlock_leader_info *i) const noexcept { ironlock_leader_info_free(i); }
};
struct observer_deleter {
    void operator()(ironlock_observer *o) const noexcept { ironlock_observer_free(o); }
};

/// A timeout or wait for the argument `name` of a C call that reads 0 as "no deadline": an
/// explicit 0 would mean the opposite, so it is refused.
template <class Rep, class Period>
std::uint64_t deadline_millis(const char *name, std::chrono::duration<Rep, Period> d) {
    const std::uint64_t ms = millis(name, d);
    if (ms == 0) invalid(std::string(name) + ": must be at least 1 ms");
    return ms;
}

}  // namespace detail

/// Who leads an election, as read (`manager::leader`, `observer::next`).
struct leader_info {
    std::string value;                   ///< what the leader advertises, as last proclaimed
    std::uint64_t term = 0;              ///< its fencing token; every later leader's is larger
    std::string token;                   ///< its leadership's token
    std::chrono::milliseconds validity{0};  ///< how long it stays valid at most, when read
};

namespace detail {

/// Takes (and frees) a C leader info: empty for NULL (nobody leads).
inline std::optional<leader_info> take(ironlock_leader_info *raw) {
    std::unique_ptr<ironlock_leader_info, leader_info_deleter> info(raw);
    if (!info) return std::nullopt;
    const char *value = ironlock_leader_info_value(info.get());
    const char *token = ironlock_leader_info_token(info.get());
    return leader_info{value ? value : "", ironlock_leader_info_term(info.get()), token ? token : "",
                       std::chrono::milliseconds(ironlock_leader_info_validity_ms(info.get()))};
}

}  // namespace detail

/// Manager settings (those of `ironlock_config_set_*`), chained:
/// `config{}.node(url).retry_count(3)`. Bad values are reported (naming the setting) when the
/// manager is created.
class config {
public:
    config() : c_(ironlock_config_new()) {
        if (!c_) throw std::bad_alloc();
    }

    config &node(const std::string &url) { return apply(ironlock_config_add_node(c_.get(), detail::c_str("nodes", url))); }
    config &retry_count(std::uint32_t n) { return apply(ironlock_config_set_retry_count(c_.get(), n)); }
    template <class R, class P> config &retry_delay(std::chrono::duration<R, P> d) {
        return apply(ironlock_config_set_retry_delay_ms(c_.get(), detail::millis("retry_delay", d)));
    }
    template <class R, class P> config &retry_jitter(std::chrono::duration<R, P> d) {
        return apply(ironlock_config_set_retry_jitter_ms(c_.get(), detail::millis("retry_jitter", d)));
    }
    config &drift_factor(double f) { return apply(ironlock_config_set_drift_factor(c_.get(), f)); }
    template <class R, class P> config &drift_constant(std::chrono::duration<R, P> d) {
        return apply(ironlock_config_set_drift_constant_ms(c_.get(), detail::millis("drift_constant", d)));
    }
    template <class R, class P> config &node_timeout(std::chrono::duration<R, P> d) {
        return apply(ironlock_config_set_node_timeout_ms(c_.get(), detail::millis("node_timeout", d)));
    }
    template <class R, class P> config &connect_timeout(std::chrono::duration<R, P> d) {
        return apply(ironlock_config_set_connect_timeout_ms(c_.get(), detail::millis("connect_timeout", d)));
    }
    template <class R, class P> config &max_ttl(std::chrono::duration<R, P> d) {
        return apply(ironlock_config_set_max_ttl_ms(c_.get(), detail::millis("max_ttl", d)));
    }
    config &restart_quarantine(bool on) { return apply(ironlock_config_set_restart_quarantine(c_.get(), on)); }
    config &replica_acks(std::uint32_t n) { return apply(ironlock_config_set_replica_acks(c_.get(), n)); }
    config &reseat(bool on) { return apply(ironlock_config_set_reseat(c_.get(), on)); }
    config &key_prefix(const std::string &p) { return apply(ironlock_config_set_key_prefix(c_.get(), detail::c_str("key_prefix", p))); }
    template <class R, class P> config &min_validity(std::chrono::duration<R, P> d) {
        return apply(ironlock_config_set_min_validity_ms(c_.get(), detail::millis("min_validity", d)));
    }
    config &max_extensions(std::uint32_t n) { return apply(ironlock_config_set_max_extensions(c_.get(), n)); }
    template <class R, class P> config &extension_threshold(std::chrono::duration<R, P> d) {
        return apply(ironlock_config_set_extension_threshold_ms(c_.get(), detail::millis("extension_threshold", d)));
    }
    /// Acquire fairly (FIFO across the quorum) unless an acquire says otherwise.
    config &fair(bool on) { return apply(ironlock_config_set_fair(c_.get(), on)); }
    /// How long a fair waiter's queue entry outlives its last heartbeat (default 2 × retry_delay).
    template <class R, class P> config &queue_timeout(std::chrono::duration<R, P> d) {
        return apply(ironlock_config_set_queue_timeout_ms(c_.get(), detail::millis("queue_timeout", d)));
    }
    /// Mutual TLS and private CAs: PEM files, read now.
    config &tls_ca_cert_file(const std::string &path) {
        return apply(ironlock_config_set_tls_ca_cert_file(c_.get(), detail::c_str("tls_ca_cert_file", path)));
    }
    config &tls_client_cert_file(const std::string &path) {
        return apply(ironlock_config_set_tls_client_cert_file(c_.get(), detail::c_str("tls_client_cert_file", path)));
    }
    config &tls_client_key_file(const std::string &path) {
        return apply(ironlock_config_set_tls_client_key_file(c_.get(), detail::c_str("tls_client_key_file", path)));
    }
    /// The name the nodes' certificates must hold when the URLs name them otherwise (SNI too).
    config &tls_server_name(const std::string &name) {
        return apply(ironlock_config_set_tls_server_name(c_.get(), detail::c_str("tls_server_name", name)));
    }
    /// Node `index`'s own TLS (PEM text and a server name); an empty optional keeps the manager's.
    config &node_tls(std::size_t index, const std::optional<std::string> &ca_pem,
                     const std::optional<std::string> &cert_pem, const std::optional<std::string> &key_pem,
                     const std::optional<std::string> &server_name) {
        auto c = [](const char *name, const std::optional<std::string> &s) {
            return s ? detail::c_str(name, *s) : nullptr;
        };
        return apply(ironlock_config_set_node_tls(c_.get(), index, c("ca_pem", ca_pem), c("cert_pem", cert_pem),
                                                  c("key_pem", key_pem), c("server_name", server_name)));
    }

    const ironlock_config *get() const noexcept { return c_.get(); }

private:
    config &apply(ironlock_status s) {
        detail::check(s);
        return *this;
    }
    std::unique_ptr<ironlock_config, detail::config_deleter> c_;
};

/// Options of one acquire.
struct acquire_options {
    /// Keep retrying until this much time has passed (none: the manager's retry_count rounds).
    /// At least 1 ms; 0 or negative throws IRONLOCK_INVALID_ARGUMENT.
    std::optional<std::chrono::milliseconds> wait;
    /// Further rounds after the first for this call (0: one round, a try-lock).
    std::optional<std::uint32_t> retry_count;
    /// Compute a fencing token.
    bool fencing = false;
    /// Wait in line (FIFO across the quorum); none: the manager's `fair` setting.
    std::optional<bool> fair;
};

/// A lock granted by a quorum. Move-only; released (without throwing) when it goes out of scope
/// still held: call `finish()` to learn whether the work held it to its end.
class lock {
public:
    explicit lock(ironlock_lock *l) noexcept : l_(l) {}
    lock(lock &&) noexcept = default;
    lock &operator=(lock &&other) noexcept {
        if (this != &other) {
            release_quietly();
            l_ = std::move(other.l_);
            done_ = other.done_;
        }
        return *this;
    }
    lock(const lock &) = delete;
    lock &operator=(const lock &) = delete;
    ~lock() { release_quietly(); }

    /// Extends every key to `ttl` from now on a quorum (throws IRONLOCK_LOST when lost).
    template <class R, class P> void extend(std::chrono::duration<R, P> ttl) {
        detail::check(ironlock_extend(l_.get(), detail::millis("ttl", ttl)));
    }
    /// Releases; returns whether a quorum still held the lock (never throws for a lost lock).
    bool release() {
        bool held = false;
        detail::check(ironlock_release_held(l_.get(), &held));
        done_ = true;
        return held;
    }
    /// Ends the critical section with the loss rule every language shares: releases, and throws
    /// ironlock::error (IRONLOCK_LOST) when the lock was lost or expired before, or the release
    /// found its token on fewer than a quorum.
    void finish() {
        done_ = true;
        detail::check(ironlock_lock_finish(l_.get()));
    }
    /// Keeps the lock extended in the background until release or destruction; on loss the
    /// library releases it and `lost()` turns true.
    void auto_extend() { detail::check(ironlock_lock_auto_extend(l_.get(), nullptr, nullptr)); }

    std::chrono::milliseconds validity() const noexcept {
        return std::chrono::milliseconds(ironlock_lock_validity_ms(l_.get()));
    }
    bool valid() const noexcept { return ironlock_lock_is_valid(l_.get()); }
    bool lost() const noexcept { return ironlock_lock_is_lost(l_.get()); }
    std::string token() const { return ironlock_lock_token(l_.get()); }
    /// The fencing token, when acquired with fencing.
    std::optional<std::uint64_t> fence() const noexcept {
        std::uint64_t f = 0;
        return ironlock_lock_fence(l_.get(), &f) == IRONLOCK_OK ? std::optional<std::uint64_t>(f)
                                                                 : std::nullopt;
    }
    /// For a read-write lock: IRONLOCK_ACCESS_READ or IRONLOCK_ACCESS_WRITE; IRONLOCK_ACCESS_NONE
    /// for a plain lock or a semaphore permit.
    ironlock_access access() const noexcept { return ironlock_lock_access(l_.get()); }
    ironlock_lock *get() const noexcept { return l_.get(); }

private:
    void release_quietly() noexcept {
        if (l_ && !done_) ironlock_release(l_.get());
        done_ = true;
    }
    std::unique_ptr<ironlock_lock, detail::lock_deleter> l_;
    bool done_ = false;
};

/// This candidate's leadership of an election (`manager::campaign`), kept extended in the
/// background. Move-only; resigns (without throwing) when it goes out of scope, so that the
/// next candidate leads at once. To step away as a dying process would (the next candidate
/// leads once the key expires), use `abandon()`.
class leadership {
public:
    explicit leadership(ironlock_leadership *l) noexcept : l_(l) {}
    leadership(leadership &&) noexcept = default;
    leadership &operator=(leadership &&other) noexcept {
        if (this != &other) {
            resign_quietly();
            l_ = std::move(other.l_);
            done_ = other.done_;
        }
        return *this;
    }
    leadership(const leadership &) = delete;
    leadership &operator=(const leadership &) = delete;
    ~leadership() { resign_quietly(); }

    /// The term: the fencing token of the grant, larger than every earlier leader's.
    std::uint64_t term() const noexcept { return ironlock_leadership_term(l_.get()); }
    std::string token() const {
        const char *t = ironlock_leadership_token(l_.get());
        return t ? t : "";
    }
    /// The value advertised: the campaign's, or the last one proclaimed.
    std::string value() const {
        const char *v = ironlock_leadership_value(l_.get());
        return v ? v : "";
    }
    /// How long it stays valid: it ends a tenth of the ttl (at most 1 s) before the key does.
    std::chrono::milliseconds validity() const noexcept {
        return std::chrono::milliseconds(ironlock_leadership_validity_ms(l_.get()));
    }
    /// True while this candidate leads (not lost, resigned or run out).
    bool is_leader() const noexcept { return ironlock_leadership_is_leader(l_.get()); }
    /// True once the leadership is known lost.
    bool lost() const noexcept { return ironlock_leadership_is_lost(l_.get()); }

    /// Waits until the leadership ends (lost, or resigned from another thread).
    void wait_lost() { ended(ironlock_leadership_wait_lost(l_.get(), 0)); }
    /// Waits at most `timeout` (at least 1 ms): true once the leadership has ended, false when
    /// the timeout passed and this candidate still leads.
    template <class R, class P> bool wait_lost_for(std::chrono::duration<R, P> timeout) {
        return ended(ironlock_leadership_wait_lost(l_.get(), detail::deadline_millis("timeout", timeout)));
    }

    /// Advertises a new value, only while still leader (throws IRONLOCK_LOST otherwise).
    void proclaim(const std::string &value) {
        detail::check(ironlock_proclaim(l_.get(), detail::c_str("value", value)));
    }
    /// Steps down: deletes the key and the leader record, waking the next candidate.
    void resign() {
        done_ = true;
        detail::check(ironlock_resign(l_.get()));
    }
    /// Stops the extensions without resigning (as if the process had died): the next candidate
    /// leads once the key expires. The object is empty afterwards.
    void abandon() noexcept {
        done_ = true;
        l_.reset();
    }
    ironlock_leadership *get() const noexcept { return l_.get(); }

private:
    static bool ended(ironlock_status s) {
        if (s == IRONLOCK_LOST) return true;
        detail::check(s);
        return false;
    }
    void resign_quietly() noexcept {
        if (l_ && !done_) ironlock_resign(l_.get());
        done_ = true;
    }
    std::unique_ptr<ironlock_leadership, detail::leadership_deleter> l_;
    bool done_ = false;
};

/// The changes of leader of an election, in order (`manager::observe`). Move-only; used by one
/// thread at a time.
class observer {
public:
    explicit observer(ironlock_observer *o) noexcept : o_(o) {}

    /// The next change of leader, waiting as long as it takes (the first call: who leads now):
    /// the leader, or empty when nobody leads. Terms only grow; a proclaim is a change too.
    /// Throws ironlock::error (IRONLOCK_UNAVAILABLE) once the manager is closed.
    std::optional<leader_info> next() {
        bool changed = false;
        ironlock_leader_info *info = nullptr;
        detail::check(ironlock_observer_next(o_.get(), 0, &changed, &info));
        return detail::take(info);
    }
    /// The same, waiting at most `timeout` (at least 1 ms): std::nullopt when no change came in
    /// time; otherwise the change, itself empty when nobody leads.
    template <class R, class P> std::optional<std::optional<leader_info>> next_for(std::chrono::duration<R, P> timeout) {
        bool changed = false;
        ironlock_leader_info *info = nullptr;
        detail::check(ironlock_observer_next(o_.get(), detail::deadline_millis("timeout", timeout), &changed, &info));
        std::optional<leader_info> leader = detail::take(info);
        if (!changed) return std::nullopt;
        return std::optional<std::optional<leader_info>>(std::in_place, std::move(leader));
    }
    ironlock_observer *get() const noexcept { return o_.get(); }

private:
    std::unique_ptr<ironlock_observer, detail::observer_deleter> o_;
};

/// Takes Redlock locks over N independent Redis masters. Move-only; shareable by threads.
class manager {
public:
    explicit manager(const config &c) {
        ironlock_manager *m = nullptr;
        detail::check(ironlock_manager_new(c.get(), &m));
        m_.reset(m);
    }

    /// Acquires every resource (all of them or none, on each node) for `ttl`; throws
    /// ironlock::error (IRONLOCK_CONTENDED, IRONLOCK_UNAVAILABLE, …) with the report.
    template <class R, class P>
    lock acquire(const std::vector<std::string> &resources, std::chrono::duration<R, P> ttl,
                 const acquire_options &options = {}) {
        std::vector<const char *> names;
        names.reserve(resources.size());
        for (const auto &r : resources) {
            names.push_back(detail::c_str("resources[" + std::to_string(names.size()) + "]", r));
        }
        auto o = c_options(options);
        ironlock_lock *l = nullptr;
        detail::check(ironlock_acquire_with(m_.get(), names.data(), names.size(), detail::millis("ttl", ttl), o.get(), &l));
        return lock(l);
    }

    /// Acquires one of `limit` permits of the counting semaphore `resource` for
    /// `ttl`: a lock like any other (extend, release, auto-extension, fencing). It needs
    /// floor(limit × N / (limit + 1)) + 1 admitting nodes; throws ironlock::error
    /// (IRONLOCK_CONTENDED when every permit is held) with the report.
    template <class R, class P>
    lock acquire_permit(const std::string &resource, std::uint32_t limit, std::chrono::duration<R, P> ttl,
                        const acquire_options &options = {}) {
        auto o = c_options(options);
        ironlock_lock *l = nullptr;
        detail::check(ironlock_acquire_permit(m_.get(), detail::c_str("resource", resource), limit,
                                              detail::millis("ttl", ttl), o.get(), &l));
        return lock(l);
    }

    /// Acquires the read (shared) side of the read-write lock `resource` for `ttl`: readers
    /// share it; a writer or a plain lock of the same name excludes them, and so does a waiting
    /// writer. A lock like any other (extend, release, auto-extension, fencing); throws
    /// ironlock::error (IRONLOCK_CONTENDED while a writer holds or waits; IRONLOCK_INVALID_ARGUMENT
    /// for `fair` true, which read-write locks refuse) with the report.
    template <class R, class P>
    lock acquire_read(const std::string &resource, std::chrono::duration<R, P> ttl,
                      const acquire_options &options = {}) {
        auto o = c_options(options);
        ironlock_lock *l = nullptr;
        detail::check(ironlock_acquire_read(m_.get(), detail::c_str("resource", resource),
                                            detail::millis("ttl", ttl), o.get(), &l));
        return lock(l);
    }

    /// Acquires the write (exclusive) side of the read-write lock `resource` for `ttl`: it
    /// excludes readers, other writers and plain locks of the same name, and new readers are
    /// refused while it waits. Throws ironlock::error as `acquire_read`.
    template <class R, class P>
    lock acquire_write(const std::string &resource, std::chrono::duration<R, P> ttl,
                       const acquire_options &options = {}) {
        auto o = c_options(options);
        ironlock_lock *l = nullptr;
        detail::check(ironlock_acquire_write(m_.get(), detail::c_str("resource", resource),
                                             detail::millis("ttl", ttl), o.get(), &l));
        return lock(l);
    }

    /// Waits in line for the election `name` until this candidate leads (candidates lead in the
    /// order they queued), advertising `value`; the leadership is kept extended in the
    /// background and resigned when it goes out of scope. `ttl` bounds how long the election
    /// stays with a leader that died. `wait` (at least 1 ms) gives up with ironlock::error
    /// (IRONLOCK_CONTENDED), leaving the line; none waits as long as it takes.
    template <class R, class P>
    leadership campaign(const std::string &name, const std::string &value, std::chrono::duration<R, P> ttl,
                        std::optional<std::chrono::milliseconds> wait = std::nullopt) {
        const std::uint64_t wait_ms = wait ? detail::deadline_millis("wait", *wait) : 0;
        ironlock_leadership *l = nullptr;
        detail::check(ironlock_campaign(m_.get(), detail::c_str("name", name), detail::c_str("value", value),
                                        detail::millis("ttl", ttl), wait_ms, &l));
        return leadership(l);
    }

    /// Who leads the election `name`, read from a quorum of nodes; empty when nobody leads.
    std::optional<leader_info> leader(const std::string &name) {
        ironlock_leader_info *info = nullptr;
        detail::check(ironlock_leader(m_.get(), detail::c_str("name", name), &info));
        return detail::take(info);
    }

    /// Follows the changes of leader of the election `name` (`observer::next`).
    observer observe(const std::string &name) {
        ironlock_observer *o = nullptr;
        detail::check(ironlock_observe(m_.get(), detail::c_str("name", name), &o));
        return observer(o);
    }

    /// One counter of the manager's stats by its field name ("granted", "contended",
    /// "rounds", ...); throws ironlock::error (IRONLOCK_INVALID_ARGUMENT) for an unknown name.
    std::uint64_t stat(const std::string &name) const {
        std::uint64_t v = 0;
        detail::check(ironlock_manager_stat(m_.get(), detail::c_str("name", name), &v));
        return v;
    }

    /// The whole stats snapshot as JSON (counters and latency histograms).
    std::string stats_json() const {
        const char *j = ironlock_manager_stats_json(m_.get());
        return j ? std::string(j) : std::string();
    }

    ironlock_manager *get() const noexcept { return m_.get(); }

private:
    static std::unique_ptr<ironlock_acquire_opts, detail::opts_deleter> c_options(const acquire_options &options) {
        std::unique_ptr<ironlock_acquire_opts, detail::opts_deleter> o(ironlock_acquire_opts_new());
        if (!o) throw std::bad_alloc();
        if (options.wait) {
            // The C call reads 0 as "no deadline"; here an explicit wait of 0 would mean the opposite.
            if (options.wait->count() == 0) detail::invalid("wait: must be at least 1 ms (one round: retry_count = 0)");
            detail::check(ironlock_acquire_opts_set_wait_ms(o.get(), detail::millis("wait", *options.wait)));
        }
        if (options.retry_count) detail::check(ironlock_acquire_opts_set_retry_count(o.get(), *options.retry_count));
        detail::check(ironlock_acquire_opts_set_fencing(o.get(), options.fencing));
        if (options.fair) detail::check(ironlock_acquire_opts_set_fair(o.get(), *options.fair));
        return o;
    }

    std::unique_ptr<ironlock_manager, detail::manager_deleter> m_;
};

}  // namespace ironlock

#endif  // IRONLOCK_HPP
