//! What a Ray node container prints when it starts: the `ray start --head` (or
//! worker) lines of the real Ray CLI, with the pod's IP.

use k8s_openapi::jiff::Timestamp;

/// The `ray start` log of a head (`head`) or worker node at `ip`.
pub(super) fn ray_start_log(head: bool, ip: &str) -> String {
    let ts = Timestamp::now().strftime("%Y-%m-%d %H:%M:%S,%3f");
    if head {
        format!(
            "{ts}\tINFO usage_lib.py:467 -- Usage stats collection is disabled.\n\
             {ts}\tINFO scripts.py:865 -- Local node IP: {ip}\n\
             {ts}\tSUCC scripts.py:902 -- --------------------\n\
             {ts}\tSUCC scripts.py:903 -- Ray runtime started.\n\
             {ts}\tSUCC scripts.py:904 -- --------------------\n\
             {ts}\tINFO scripts.py:906 -- Next steps\n\
             {ts}\tINFO scripts.py:909 -- To add another node to this Ray cluster, run\n\
             {ts}\tINFO scripts.py:912 --   ray start --address='{ip}:6379'\n\
             {ts}\tINFO scripts.py:921 -- To connect to this Ray cluster:\n\
             {ts}\tINFO scripts.py:1007 -- --block\n\
             {ts}\tINFO scripts.py:1008 -- This command will now block forever until terminated by a signal.\n"
        )
    } else {
        format!(
            "{ts}\tINFO scripts.py:1046 -- Local node IP: {ip}\n\
             {ts}\tSUCC scripts.py:1059 -- --------------------\n\
             {ts}\tSUCC scripts.py:1060 -- Ray runtime started.\n\
             {ts}\tSUCC scripts.py:1061 -- --------------------\n\
             {ts}\tINFO scripts.py:1089 -- --block\n"
        )
    }
}
