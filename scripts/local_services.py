"""Throwaway servers on 127.0.0.1 for the scripts that run a fleet without Docker: free ports, a PostgreSQL from
the installed packages (run as `nobody` when the caller is root), nginx, and stopping what was started, by PID."""
import glob
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time


_handed_out = set()


def _ephemeral_low():
    """The lowest port the kernel gives outgoing connections (32768 unless configured otherwise)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port():
    """A port free on 127.0.0.1 now, below the kernel's range for outgoing connections, and not one this process
    handed out before. A port from `bind(0)` comes from that range: between this call and the server's bind, any
    connection the run opens (a replica to PostgreSQL, nginx to a backend) may take it, and the server then fails
    to start. Two servers of one run are never told the same port."""
    low = min(_ephemeral_low(), 65536)
    candidates = range(10000, low) if low > 11000 else range(1024, 65536)
    for _ in range(200):
        port = random.choice(candidates)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    sys.exit("no free port on 127.0.0.1 below the range for outgoing connections")


def postgres_bin():
    for directory in os.environ.get("PATH", "").split(":") + sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.access(os.path.join(directory, "initdb"), os.X_OK):
            return directory
    sys.exit("needs PostgreSQL's initdb and postgres: apt-get install postgresql")


def nginx_bin():
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)
    if not found:
        sys.exit("needs nginx: apt-get install nginx-light (or nginx)")
    return found


def as_unprivileged():
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.getuid() == 0 else []


def wait_for(what, check, limit=30):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.05)
    sys.exit(f"{what} did not come up within {limit}s")


def listening(port):
    return lambda: socket.create_connection(("127.0.0.1", port), timeout=1).close() or True


class Services:
    """What a script started, stopped in reverse order by PID (SIGINT, then SIGKILL after 30 s)."""

    def __init__(self):
        self.started = []

    def start(self, arguments, **options):
        options.setdefault("stdout", subprocess.DEVNULL)
        process = subprocess.Popen(arguments, **options)
        self.started.append(process)
        return process

    def stop_all(self):
        for process in reversed(self.started):
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()

    def postgres(self, work, user="sdui", fsync=False):
        """A PostgreSQL server in `work`/pg on a free port, trusting local logins; returns the port. Without
        `fsync` (the default, for checks) a commit is not flushed to disk; benchmarks of durable writes set it."""
        bin_dir = postgres_bin()
        data = os.path.join(work, "pg")
        os.makedirs(data)
        if os.getuid() == 0:
            os.chown(data, 65534, 65534)
        subprocess.run(as_unprivileged() + [f"{bin_dir}/initdb", "-D", data, "-U", user, "--auth=trust"],
                       check=True, stdout=subprocess.DEVNULL)
        port = free_port()
        self.start(as_unprivileged() + [
            f"{bin_dir}/postgres", "-D", data, "-p", str(port), "-k", data, "-c", "listen_addresses=127.0.0.1",
            "-c", "fsync=" + ("on" if fsync else "off")], stderr=subprocess.DEVNULL)
        wait_for("postgres", listening(port))
        return port

    def nginx(self, work, name, server_config, port):
        """nginx in the foreground with `server_config` (server and upstream blocks) in `work`/`name`, as `nobody`
        when the caller is root; waits until `port` accepts connections. Returns the process."""
        directory = os.path.join(work, name)
        os.makedirs(directory)
        with open(os.path.join(directory, "servers.conf"), "w") as f:
            f.write(server_config)
        with open(os.path.join(directory, "nginx.conf"), "w") as f:
            f.write(f"""daemon off;
pid {directory}/nginx.pid;
error_log {directory}/error.log;
events {{}}
http {{
    access_log off;
    client_body_temp_path {directory}; proxy_temp_path {directory}; fastcgi_temp_path {directory};
    uwsgi_temp_path {directory}; scgi_temp_path {directory};
    include {directory}/servers.conf;
}}
""")
        if os.getuid() == 0:
            for path in (directory, *[os.path.join(directory, f) for f in os.listdir(directory)]):
                os.chown(path, 65534, 65534)
        process = self.start(as_unprivileged() + [nginx_bin(), "-c", f"{directory}/nginx.conf", "-p", directory],
                             stderr=subprocess.DEVNULL)
        wait_for(name, listening(port))
        return process


def run_in_work_directory(prefix, services, run):
    """Calls `run` with a new directory anyone can read (servers run as `nobody` read from it); afterwards stops
    what `services` started and removes the directory, whatever happened."""
    work = tempfile.mkdtemp(prefix=prefix)
    os.chmod(work, 0o755)
    try:
        run(work)
    finally:
        services.stop_all()
        shutil.rmtree(work, ignore_errors=True)
