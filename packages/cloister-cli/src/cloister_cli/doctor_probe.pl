# `cloister doctor`'s probe: run in a sidecar of Cloister's slim image that shares only
# the cloister's network namespace, to try what an agent would try to get out. Perl with
# perl-base's modules only. Every target is an address: the sidecar shares the
# cloister's /etc/hosts, which the agent may have written.
#
# Input, on stdin: "NAME<TAB>VALUE" lines, then "end" (see cloister_cli.doctor.probe_input).
# Output: one line per check, "ID<TAB>pass|fail<TAB>evidence". Each check runs in a child
# of its own, all at once, each bounded by alarm(); a child that does not answer in time
# is a failure.
use strict;
use warnings;
use Socket qw(AF_INET SOCK_STREAM SOCK_DGRAM inet_aton sockaddr_in);
use IO::Select;
use POSIX qw(:errno_h);
# Fractions of seconds where the image has them (not in perl-base alone).
BEGIN { eval { require Time::HiRes; Time::HiRes->import("time"); 1 } }

my %arg;
while (my $line = <STDIN>) {
    chomp($line);
    last if $line eq "end";
    my ($key, $value) = split /\t/, $line, 2;
    push @{ $arg{$key} }, $value // "";
}
sub many { return @{ $arg{ $_[0] } || [] } }
sub one { my @all = many($_[0]); return $all[0] // "" }
my $WAIT = one("timeout") || 2;

# An IPv4 literal packed; never a name (inet_aton would ask /etc/hosts).
sub ipv4 { return $_[0] =~ /^\d{1,3}(?:\.\d{1,3}){3}$/ ? inet_aton($_[0]) : undef }

# Connects to every "host:port" of @targets at once; for each, (target, status, detail):
# status is "connected", "refused" (a RST: something answered) or "unreachable" (no
# route, no host, no answer within $wait seconds).
sub tcp {
    my ($wait, @targets) = @_;
    my (@done, %pending);
    my $select = IO::Select->new;
    for my $target (@targets) {
        my ($host, $port) = $target =~ /^(.*):(\d+)$/;
        my $packed = ipv4($host);
        if (!$packed) { push @done, [$target, "unreachable", "$host is not an address"]; next }
        socket(my $s, AF_INET, SOCK_STREAM, 0) or return ([$target, "unreachable", "socket: $!"]);
        fcntl($s, 4, fcntl($s, 3, 0) | 2048);    # F_SETFL(F_GETFL | O_NONBLOCK)
        if (connect($s, sockaddr_in($port, $packed))) { push @done, [$target, "connected", ""]; next }
        my $errno = $! + 0;
        if ($errno != EINPROGRESS) {
            push @done, [$target, $errno == ECONNREFUSED ? "refused" : "unreachable", "$!"];
            next;
        }
        $pending{ fileno($s) } = [$target, $s];
        $select->add($s);
    }
    my $deadline = time() + $wait;
    while ($select->count && (my $left = $deadline - time()) > 0) {
        for my $s ($select->can_write($left)) {
            $select->remove($s);
            my $target = delete($pending{ fileno($s) })->[0];
            my $code = unpack("i", getsockopt($s, 1, 4) // pack("i", 0));    # SO_ERROR
            if ($code == 0) { push @done, [$target, "connected", ""]; next }
            local $! = $code;
            push @done, [$target, $code == ECONNREFUSED ? "refused" : "unreachable", "$!"];
        }
    }
    push @done, map { [$_->[0], "unreachable", "no answer in ${wait}s"] } values %pending;
    return sort { $a->[0] cmp $b->[0] } @done;
}

# Every "host:port" of @targets gets no connection; with $strict, no RST either (an
# answer of any kind means the packet got there).
sub none_answer {
    my ($strict, @targets) = @_;
    my (@bad, @seen);
    for my $each (tcp($WAIT, @targets)) {
        my ($target, $status, $detail) = @$each;
        my $note = "$target: $status" . ($detail ? " ($detail)" : "");
        push @seen, $note;
        push @bad, $note if $status eq "connected" || ($strict && $status eq "refused");
    }
    return (@bad ? 0 : 1, join("; ", @bad ? @bad : @seen));
}

sub read_file {
    open(my $fh, "<", $_[0]) or return undef;
    local $/;
    my $text = <$fh>;
    close($fh);
    return $text;
}

# -- the checks ----------------------------------------------------------------------------

my %check;

$check{"egress.tcp"} = sub {
    my @targets = ("1.1.1.1:443", "8.8.8.8:53", map { "$_:443" } many("docker0"));
    return none_answer(1, @targets);
};

$check{"egress.udp"} = sub {
    my (@bad, @seen, %socket);
    my $select = IO::Select->new;
    # A DNS query for example.com (any datagram would do; this one gets an answer).
    my $query = pack("H*", "123401000001000000000000076578616d706c6503636f6d0000010001");
    for my $target ("1.1.1.1:53", "8.8.8.8:53", "1.1.1.1:123") {
        my ($host, $port) = split /:/, $target;
        socket(my $s, AF_INET, SOCK_DGRAM, 0) or return (0, "socket: $!");
        if (!defined send($s, $query, 0, sockaddr_in($port, inet_aton($host)))) {
            push @seen, "$target: $!";
            next;
        }
        $socket{ fileno($s) } = [$target, $s];
        $select->add($s);
    }
    for my $s ($select->can_read(1.5)) {
        my $target = $socket{ fileno($s) }[0];
        delete $socket{ fileno($s) };
        my $from = recv($s, my $data, 512, 0);
        if (defined $from) { push @bad, "$target: an answer of " . length($data) . " bytes" }
        else { push @seen, "$target: $!" }
    }
    push @seen, map { "$_->[0]: sent, no answer" } values %socket;
    return (@bad ? 0 : 1, join("; ", @bad ? @bad : sort @seen));
};

$check{"egress.ipv6"} = sub {
    my @bad;
    for my $line (split /\n/, read_file("/proc/net/if_inet6") // "") {
        my ($hex, undef, undef, undef, undef, $device) = split ' ', $line;
        next if $hex eq "00000000000000000000000000000001" || $hex =~ /^fe[89ab]/;
        push @bad, join(":", unpack("(A4)*", $hex)) . " on $device";
    }
    for my $line (split /\n/, read_file("/proc/net/ipv6_route") // "") {
        my @f = split ' ', $line;
        next unless @f >= 10 && $f[1] eq "00" && $f[9] ne "lo";
        push @bad, "an IPv6 default route on $f[9]" unless hex($f[8]) & 0x0200;    # RTF_REJECT
    }
    return (@bad ? 0 : 1, @bad ? join("; ", @bad) : "only loopback and link-local");
};

$check{"egress.route"} = sub {
    # Docker gives an internal network's containers a default route to the network's
    # gateway address; inhibit_ipv4 leaves that address on no interface of the host.
    my %allowed = map { $_ => 1 } many("gateway");
    my (@bad, @seen);
    for my $line (split /\n/, read_file("/proc/net/route") // "") {
        my ($device, $destination, $gateway) = split ' ', $line;
        next unless defined $destination && $destination eq "00000000";
        my $via = join(".", reverse unpack("C4", pack("H8", $gateway)));
        if (!$allowed{$via}) { push @bad, "default route via $via on $device"; next }
        my (undef, $status, $detail) = @{ (tcp($WAIT, "$via:80"))[0] };
        my $note = "default route via $via on $device, which does not answer ($detail)";
        if ($status ne "unreachable") { push @bad, "default route via $via answers: $status"; next }
        push @seen, $note;
    }
    return (@bad ? 0 : 1, join("; ", @bad ? @bad : (@seen ? @seen : "no default route")));
};

# A DNS query for NAME's A records, with ID.
sub dns_query {
    my ($id, $name) = @_;
    my $labels = join("", map { chr(length $_) . $_ } split /\./, $name);
    return pack("nnnnnn", $id, 0x0100, 1, 0, 0, 0) . $labels . "\0" . pack("nn", 1, 1);
}

$check{"egress.dns"} = sub {
    # Asked of the engine's resolver directly (not /etc/resolv.conf, which the agent may
    # have written). A definite answer without an address passes. Docker 20.10's resolver
    # answers nothing for outside names on an internal network: that silence passes only
    # when it answered, in the same wait, a name it holds (the control: the cloister's short id).
    my $resolver = one("resolver");
    my $control = one("control");
    my $packed = ipv4($resolver) or return (0, "no resolver address");
    my @names = ("example.com", "one.one.one.one", $control ne "" ? $control : ());
    my %pending;
    my $select = IO::Select->new;
    for my $index (0 .. $#names) {
        socket(my $s, AF_INET, SOCK_DGRAM, 0) or return (0, "socket: $!");
        my $id = 0x4300 + $index;
        defined(send($s, dns_query($id, $names[$index]), 0, sockaddr_in(53, $packed)))
            or return (0, "send to $resolver: $!");
        $pending{ fileno($s) } = [$names[$index], $s, $id];
        $select->add($s);
    }
    my (%answer, @bad, @seen);
    my $deadline = time() + $WAIT;
    while ($select->count && (my $left = $deadline - time()) > 0) {
        for my $s ($select->can_read($left)) {
            my ($name, undef, $id) = @{ $pending{ fileno($s) } };
            defined(recv($s, my $data, 512, 0)) or next;
            next if length($data) < 12;
            my ($got, $flags, undef, $answers) = unpack("nnnn", $data);
            next unless $got == $id && $flags & 0x8000;    # not our answer: wait on
            $select->remove($s);
            delete $pending{ fileno($s) };
            $answer{$name} = [$flags & 0x000f, $answers];
        }
    }
    my $alive = $control ne "" && $answer{$control} && $answer{$control}[0] == 0
        && $answer{$control}[1] > 0;
    for my $name ("example.com", "one.one.one.one") {
        if (my $found = $answer{$name}) {
            my ($rcode, $answers) = @$found;
            if ($rcode == 0 && $answers > 0) { push @bad, "$name: $answers answer(s)" }
            else { push @seen, "$name: rcode $rcode, no address" }
        }
        elsif ($alive) { push @seen, "$name: no answer, though $control got one" }
        else { push @bad, "$name: no answer from $resolver in ${WAIT}s, nor for the control" }
    }
    return (0, join("; ", @bad)) if @bad;
    return (1, "$resolver gives no outside address: " . join("; ", @seen));
};

$check{"unreachable.hub"} = sub { return none_answer(0, many("hub")) };

$check{"unreachable.cloisters"} = sub {
    my @others = many("cloister");
    return (1, "no other cloister of this guardian runs") unless @others;
    return none_answer(1, map { "$_:22" } @others);
};

$check{"fail-closed.interfaces"} = sub {
    my @devices;
    for my $line (split /\n/, read_file("/proc/net/dev") // "") {
        push @devices, $1 if $line =~ /^\s*([^:\s]+):/;
    }
    my @others = grep { $_ ne "lo" } @devices;
    return (1, "lo and $others[0] (its own network) only") if @others == 1;
    return (0, "network interfaces: " . join(", ", @others));
};

# MIME::Base64 is not in perl-base: uuencode's alphabet, translated.
sub base64 {
    my ($text) = @_;
    my $encoded = join("", map { pack("u", $_) =~ /^.(\S*)/ } ($text =~ /(.{1,45})/gs));
    $encoded =~ tr|` -_|AA-Za-z0-9+/|;
    my $padding = (3 - length($text) % 3) % 3;
    $encoded =~ s/.{$padding}$/"=" x $padding/e if $padding;
    return $encoded;
}

# The proxy: CONNECT TARGET with a token; the status code it answers, or a reason.
sub connect_status {
    my ($target, $token) = @_;
    my ($host, $port) = (one("proxy") =~ /^(.*):(\d+)$/);
    my $packed = ipv4($host // "") or return "no proxy address";
    socket(my $s, AF_INET, SOCK_STREAM, 0) or return "socket: $!";
    local $SIG{ALRM} = sub { die "timeout\n" };
    my $answer = eval {
        alarm($WAIT);
        connect($s, sockaddr_in($port, $packed)) or die "connect: $!\n";
        my $auth = "";
        if (defined $token) {
            $auth = "Proxy-Authorization: Basic " . base64("cloister:$token") . "\r\n";
        }
        syswrite($s, "CONNECT $target HTTP/1.1\r\nHost: $target\r\n$auth\r\n");
        my $line = "";
        while ($line !~ /\n/) { sysread($s, $line, 512, length $line) or last }
        alarm(0);
        $line =~ m{^HTTP/1\.[01] (\d{3})} ? $1 : "no HTTP answer";
    };
    alarm(0);
    close($s);
    return $answer // "no answer: $@" =~ s/\n//r;
}

sub own_token {
    my $token = one("token");
    return $token eq "" ? undef : $token;
}

sub all_refused {
    my ($want, $token, @targets) = @_;
    my @answers = map { "$_ " . connect_status($_, $token) } @targets;
    my @bad = grep { !/ $want$/ } @answers;
    return (@bad ? 0 : 1, join("; ", @bad ? @bad : @answers));
}

$check{"proxy.literals"} = sub {
    my $token = own_token() // return (0, "the cloister's HTTPS_PROXY holds no token");
    return all_refused(
        403, $token, "127.0.0.1:443", "169.254.169.254:80", "10.0.0.1:443", "[::1]:443",
        "0x7f000001:443", "2130706433:443",
    );
};

$check{"proxy.services"} = sub {
    my $token = own_token() // return (0, "the cloister's HTTPS_PROXY holds no token");
    return all_refused(403, $token, many("service"));
};

$check{"identity.random-token"} = sub {
    my $token = join("", map { sprintf("%02x", int(rand(256))) } 1 .. 32);
    return all_refused(407, $token, "example.com:443");
};

$check{"identity.no-token"} = sub { return all_refused(407, undef, "example.com:443") };

# -- run them ------------------------------------------------------------------------------

$| = 1;
my @ids = many("check");
@ids = sort keys %check unless @ids;
my %running;
for my $id (@ids) {
    unless ($check{$id}) { syswrite(STDOUT, "$id\tfail\tthe probe has no such check\n"); next }
    my $pid = fork();
    if (!defined $pid) { syswrite(STDOUT, "$id\tfail\tfork: $!\n"); next }
    if ($pid == 0) {
        alarm($WAIT * 3);
        my ($ok, $evidence) = eval { $check{$id}->() };
        ($ok, $evidence) = (0, "error: $@") unless defined $ok;
        $evidence =~ s/[\t\n]/ /g;
        syswrite(STDOUT, "$id\t" . ($ok ? "pass" : "fail") . "\t$evidence\n");
        POSIX::_exit(0);
    }
    $running{$pid} = $id;
}
while (%running) {
    my $pid = wait();
    last if $pid < 0;
    my $id = delete $running{$pid} // next;
    # alarm() killed it before it answered.
    syswrite(STDOUT, "$id\tfail\tno answer within " . ($WAIT * 3) . "s\n") if $? & 127;
}
