# The load generator of bench_load.py, run inside a cloister: `docker exec -i CONTAINER
# perl - MODE SLOTS ROUNDS START_AT TIMEOUT TARGET [EVENTS]` with this file on stdin.
# Perl, because cloister-slim has no python3 (perl-base has sockets and Time::HiRes).
#
# SLOTS connections at once, each ROUNDS times in a row, all starting at the wall time
# START_AT (so that every cloister starts together). One JSON line per attempt:
#   {"ok":1,"wall":W,"tunnel":S,"first":S,"full":S}   seconds from W (monotonic clock)
#   {"ok":0,"wall":W,"err":"..."}
#
# tunnel: a new connection to the proxy of $HTTPS_PROXY (its token as Basic auth),
#   CONNECT TARGET (host:port), then `GET /tunnel` through the tunnel, answered and
#   closed by the upstream. "tunnel" is the proxy's 200, "first" the upstream's first
#   byte, "full" its close: each from the start of the connect.
# stream: a kept-alive connection to the credential gateway of $ANTHROPIC_BASE_URL,
#   `POST <base>/v1/messages` with $ANTHROPIC_AUTH_TOKEN; "first" is the first byte of
#   the streamed body, "full" its last chunk, from sending the request (and connecting,
#   when a new connection is needed). EVENTS: how many SSE events the answer must hold.
use strict;
use warnings;
use Errno qw(EINPROGRESS EAGAIN EINTR);
use Fcntl qw(F_GETFL F_SETFL O_NONBLOCK);
use MIME::Base64 qw(encode_base64);
use Socket qw(PF_INET SOCK_STREAM IPPROTO_TCP TCP_NODELAY SOL_SOCKET SO_ERROR
              inet_aton pack_sockaddr_in);
use Time::HiRes qw(time sleep clock_gettime CLOCK_MONOTONIC);

my ($mode, $slots, $rounds, $start_at, $timeout, $target, $events) = @ARGV;
die "usage: perl - tunnel|stream SLOTS ROUNDS START_AT TIMEOUT TARGET [EVENTS]\n"
    unless defined $target && ($mode eq 'tunnel' || $mode eq 'stream');

sub now { return clock_gettime(CLOCK_MONOTONIC); }

sub clean {    # an error message fit for a JSON string
    my ($text) = @_;
    $text =~ s/[^\x20-\x7e]/?/g;
    $text =~ s/["\\]/'/g;
    return substr($text, 0, 300);
}

my ($peer, $request);
if ($mode eq 'tunnel') {
    my $proxy = $ENV{HTTPS_PROXY} // die "no HTTPS_PROXY\n";
    my ($user, $secret, $host, $port) = $proxy =~ m{^http://([^:]+):([^@]+)@([^:/]+):(\d+)}
        or die "HTTPS_PROXY is not http://USER:TOKEN\@HOST:PORT\n";
    my $address = inet_aton($host) // die "cannot resolve $host\n";
    $peer = pack_sockaddr_in($port, $address);
    my $auth = encode_base64("$user:$secret", '');
    $request = "CONNECT $target HTTP/1.1\r\nHost: $target\r\n"
        . "Proxy-Authorization: Basic $auth\r\n\r\n";
} else {
    my $base = $ENV{ANTHROPIC_BASE_URL} // die "no ANTHROPIC_BASE_URL\n";
    my $token = $ENV{ANTHROPIC_AUTH_TOKEN} // die "no ANTHROPIC_AUTH_TOKEN\n";
    my ($host, $port, $prefix) = $base =~ m{^http://([^:/]+):(\d+)(/.*)?$}
        or die "ANTHROPIC_BASE_URL is not http://HOST:PORT/PREFIX\n";
    my $address = inet_aton($host) // die "cannot resolve $host\n";
    $peer = pack_sockaddr_in($port, $address);
    my $body = '{"model":"claude-sonnet-4-5","max_tokens":256,"stream":true,'
        . '"messages":[{"role":"user","content":"Say hello."}]}';
    $request = "POST " . ($prefix // '') . "/v1/messages HTTP/1.1\r\nHost: $host:$port\r\n"
        . "Authorization: Bearer $token\r\nanthropic-version: 2023-06-01\r\n"
        . "Content-Type: application/json\r\nContent-Length: " . length($body) . "\r\n\r\n"
        . $body;
}

my @slots = map { { index => $_, done => 0 } } 0 .. $slots - 1;
my %by_fd;

sub emit {
    my ($slot, %figures) = @_;
    my $line = join ',', map { sprintf '"%s":%.6f', $_, $figures{$_} } sort keys %figures;
    printf "{\"ok\":1,\"wall\":%.6f,%s}\n", $slot->{wall}, $line;
}

sub close_socket {
    my ($slot) = @_;
    return unless $slot->{sock};
    delete $by_fd{fileno $slot->{sock}};
    close $slot->{sock};
    delete $slot->{sock};
}

sub open_socket {
    my ($slot) = @_;
    socket(my $sock, PF_INET, SOCK_STREAM, 0) or return "socket: $!";
    fcntl($sock, F_SETFL, fcntl($sock, F_GETFL, 0) | O_NONBLOCK) or return "fcntl: $!";
    setsockopt($sock, IPPROTO_TCP, TCP_NODELAY, 1);
    connect($sock, $peer) or $! == EINPROGRESS or return "connect: $!";
    $slot->{sock} = $sock;
    $slot->{connecting} = 1;
    $slot->{generation}++;    # readiness seen for an earlier socket is not this one's
    $by_fd{fileno $sock} = $slot;
    return;
}

sub begin {    # the slot's next attempt, or nothing when it has had its rounds
    my ($slot) = @_;
    if ($slot->{done} >= $rounds) {
        close_socket($slot);
        return;
    }
    $slot->{done}++;
    @$slot{qw(wall t0 in out state first tunnel)} = (time, now(), '', $request, 'head', 0, 0);
    $slot->{state} = 'proxy' if $mode eq 'tunnel';
    if (!$slot->{sock}) {
        my $error = open_socket($slot);
        fail($slot, $error) if $error;
    }
}

sub fail {
    my ($slot, $error) = @_;
    printf "{\"ok\":0,\"wall\":%.6f,\"err\":\"%s\"}\n", $slot->{wall}, clean($error);
    close_socket($slot);
    begin($slot);
}

sub finish {
    my ($slot, %figures) = @_;
    emit($slot, %figures);
    begin($slot);
}

sub on_writable {
    my ($slot) = @_;
    if ($slot->{connecting}) {
        my $error = unpack 'i', getsockopt($slot->{sock}, SOL_SOCKET, SO_ERROR);
        return fail($slot, 'connect: ' . ($! = $error)) if $error;
        $slot->{connecting} = 0;
    }
    my $wrote = syswrite $slot->{sock}, $slot->{out};
    if (!defined $wrote) {
        return if $! == EAGAIN || $! == EINTR;
        return fail($slot, "write: $!");
    }
    substr($slot->{out}, 0, $wrote) = '';
}

sub chunked_body {    # the decoded body once its last chunk is in, else undef
    my ($raw) = @_;
    my ($body, $at) = ('', 0);
    while (1) {
        my $end = index $raw, "\r\n", $at;
        return if $end < 0;
        my ($size) = substr($raw, $at, $end - $at) =~ /^([0-9a-fA-F]+)/ or return '';
        $size = hex $size;
        return $body if $size == 0 && length($raw) >= $end + 4;
        return if length($raw) < $end + 2 + $size + 2;
        $body .= substr $raw, $end + 2, $size;
        $at = $end + 2 + $size + 2;
    }
}

sub on_tunnel_data {
    my ($slot, $eof) = @_;
    my $elapsed = now() - $slot->{t0};
    if ($slot->{state} eq 'proxy') {
        return fail($slot, 'the proxy closed before answering') if $eof;
        my $end = index $slot->{in}, "\r\n\r\n";
        return if $end < 0;
        my ($status) = $slot->{in} =~ /^([^\r\n]*)/;
        return fail($slot, "the proxy answered: $status") unless $status =~ m{^HTTP/1\.[01] 200 };
        $slot->{tunnel} = $elapsed;
        $slot->{in} = substr $slot->{in}, $end + 4;
        $slot->{out} = "GET /tunnel HTTP/1.1\r\nHost: $target\r\nConnection: close\r\n\r\n";
        $slot->{state} = 'answer';
        return;
    }
    $slot->{first} ||= $elapsed if length $slot->{in};
    return unless $eof;
    return fail($slot, 'the tunnel closed before the answer: ' . $slot->{in})
        unless $slot->{in} =~ m{^HTTP/1\.1 200 .*\r\n\r\nok\z}s;
    close_socket($slot);
    finish($slot, tunnel => $slot->{tunnel}, first => $slot->{first}, full => $elapsed);
}

sub on_stream_data {
    my ($slot, $eof) = @_;
    my $elapsed = now() - $slot->{t0};
    if ($slot->{state} eq 'head') {
        my $end = index $slot->{in}, "\r\n\r\n";
        if ($end < 0) {
            return fail($slot, 'the gateway closed before answering') if $eof;
            return;
        }
        my $head = substr $slot->{in}, 0, $end + 4;
        my ($status) = $head =~ /^([^\r\n]*)/;
        return fail($slot, "the gateway answered: $slot->{in}")
            unless $status =~ m{^HTTP/1\.1 200 };
        return fail($slot, "the answer is not chunked: $head")
            unless $head =~ /\r\ntransfer-encoding: *chunked\r\n/i;
        $slot->{close_after} = $head =~ /\r\nconnection: *close\r\n/i;
        $slot->{in} = substr $slot->{in}, $end + 4;
        $slot->{state} = 'body';
    }
    $slot->{first} ||= $elapsed if length $slot->{in};
    my $body = chunked_body($slot->{in});
    if (!defined $body) {
        return fail($slot, 'the gateway closed mid-stream') if $eof;
        return;
    }
    my $count = () = $body =~ /^event: /mg;
    return fail($slot, "$count events, not $events") unless $count == $events;
    close_socket($slot) if $slot->{close_after} || $eof;
    finish($slot, first => $slot->{first}, full => $elapsed);
}

sub on_readable {
    my ($slot) = @_;
    my $read = sysread $slot->{sock}, my $data, 65536;
    if (!defined $read) {
        return if $! == EAGAIN || $! == EINTR;
        return fail($slot, "read: $!");
    }
    $slot->{in} .= $data;
    return $mode eq 'tunnel' ? on_tunnel_data($slot, $read == 0) : on_stream_data($slot, $read == 0);
}

my $late = time - $start_at;
sleep(-$late) if $late < 0;
printf "{\"late\":%.6f}\n", $late > 0 ? $late : 0;
begin($_) for @slots;
while (%by_fd) {
    my ($readers, $writers) = ('', '');
    for my $slot (values %by_fd) {
        my $fd = fileno $slot->{sock};
        vec($readers, $fd, 1) = 1 unless $slot->{connecting};
        vec($writers, $fd, 1) = 1 if $slot->{connecting} || length $slot->{out};
    }
    my $ready = select(my $r = $readers, my $w = $writers, undef, 0.1);
    die "select: $!\n" if $ready < 0 && $! != EINTR;
    my $moment = now();
    for my $slot (values %by_fd) {
        next unless $slot->{sock};
        my ($fd, $generation) = (fileno $slot->{sock}, $slot->{generation});
        if ($moment - $slot->{t0} > $timeout) {
            fail($slot, "no answer within ${timeout}s ($slot->{state})");
            next;
        }
        next unless $ready > 0;
        on_writable($slot) if vec($w, $fd, 1);
        on_readable($slot) if $slot->{sock} && $slot->{generation} == $generation
            && vec($r, $fd, 1);
    }
}
