# Cloister's git guardrails (mounted read-only into every cloister): a login shell
# (`bash -l`) sets PATH afresh in /etc/profile, which then reads this file; the guarded
# git goes first again.
case $PATH in
/opt/cloister/bin | /opt/cloister/bin:*) ;;
*) PATH="/opt/cloister/bin${PATH:+:$PATH}" && export PATH ;;
esac
