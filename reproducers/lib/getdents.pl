# getdents64 and CLOCK_MONOTONIC by syscall number, for the directory readers (paced-lister,
# multi-reader): perl with no modules at all starts at once even in an emulated guest whose root
# is 9p, where loading a module costs seconds. `require` this file.
use strict;
use warnings;

# The numbers differ per architecture: read them off our own ELF header (e_machine).
my ($NR_GETDENTS64, $NR_CLOCK_GETTIME);
{
	open(my $exe, '<:raw', '/proc/self/exe') or die "$0: /proc/self/exe: $!\n";
	read($exe, my $elf, 20) == 20 or die "$0: cannot read /proc/self/exe\n";
	close($exe);
	my %nr = (62 => [217, 228], 183 => [61, 113]);	# EM_X86_64, EM_AARCH64
	my $m = $nr{unpack('v', substr($elf, 18, 2))}
		or die "$0: no syscall numbers known for this architecture\n";
	($NR_GETDENTS64, $NR_CLOCK_GETTIME) = @$m;
}

# getdents64(FH, BUFSIZE): the names of one getdents64 call; an empty list at the end of the
# directory. Dies on an error, with the errno.
sub getdents64 {
	my ($fh, $bufsize) = @_;
	my $buf = "\0" x $bufsize;
	my $n = syscall($NR_GETDENTS64, fileno($fh), $buf, $bufsize);
	die "$0: getdents64: $!\n" if $n < 0;
	my @names;
	# struct linux_dirent64: u64 d_ino, s64 d_off, u16 d_reclen, u8 d_type, char d_name[]
	for (my $pos = 0; $pos < $n;) {
		my $reclen = unpack('S', substr($buf, $pos + 16, 2));
		push @names, unpack('Z*', substr($buf, $pos + 19, $reclen - 19));
		$pos += $reclen;
	}
	return @names;
}

# Seconds since boot on CLOCK_MONOTONIC, the clock closest to the trace's timestamps.
sub monotonic {
	my $ts = "\0" x 16;
	syscall($NR_CLOCK_GETTIME, 1, $ts) == 0 or die "$0: clock_gettime: $!\n";
	my ($s, $ns) = unpack('q q', $ts);
	return $s + $ns / 1e9;
}

1;
