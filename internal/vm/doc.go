// Package vm runs microVMs for live nodes: QEMU (microvm machine) driven
// over QMP with github.com/digitalocean/go-qemu, the guest's RAM in a file,
// and a guest agent (internal/vm/guest, cmd/arbor-guest) answering over a
// virtio-serial port in a framed protocol (internal/vm/wire).
//
// # Vocabulary
//
// An Image is a guest: the Debian cloud kernel, an initramfs (busybox, the
// kernel's virtio and fuse modules, the agent as /init) and its template,
// the snapshot of the booted guest with its agent answering. A memory image
// is a file of guest RAM, immutable once written; a device state is QEMU's
// migration stream without RAM (QMP xen-save-devices-state). A VM's state
// directory holds links to the memory image and the device state it
// starts from (Seed). A VM is one QEMU process started from them (Start):
// it maps the memory image MAP_PRIVATE (share=off), so that pages it does
// not write are shared with every VM mapping the same image, and loads the
// device state with -incoming.
//
// # Lifecycle
//
//	Build (cached by the hash of every input: cold boot with RAM shared
//	  in the template's file, agent reply, device state saved, QEMU quits)
//	Seed + Start (tens to hundreds of ms under TCG; never a cold boot)
//	Fork: Pause; Save (device state, and the pages the VM wrote since
//	  its image: anonymous pages of its private mapping, read through
//	  /proc/PID/pagemap and /proc/PID/mem); inPause; Cont; Complete
//	  (the fork point's image = the VM's image plus those pages:
//	  reflinked where the filesystem can, copied otherwise, after the
//	  resume since the VM's own image is immutable); start the children
//	Suspend: the same Save into its own directory, then Kill; Start again
//	  resumes it
//
// The pause costs the device state and the pages written since the VM's
// image, not the guest's size. The source keeps running over its own
// image after the fork, so what it writes then is in its private pages,
// never in the children's image, and the other way round.
//
// # Identity
//
// Every Start begins a session with the agent: a hello with a new session
// id, the VM's hostname and 64 random bytes that the agent credits to the
// kernel's pool and reseeds the CRNG with (RNDADDENTROPY, RNDRESEEDCRNG),
// so that two children of one fork draw different random bytes. Output of
// execs of the previous session (the source's, as of the fork) is dropped;
// their processes keep running.
//
// # Files
//
// A VM started with a files directory serves it at the guest's /workspace:
// the agent's FUSE filesystem sends each call over the port by path, and
// the host answers from the directory (confined by os.Root). A mounted
// virtio-9p export would block the migration the device state is, the
// cloud kernel has no 9p, and vhost-user-fs cannot be migrated.
//
// # Accelerator
//
// DetectAccel: KVM where /dev/kvm opens and the CPU has VMX or SVM (-accel
// kvm -cpu host), TCG otherwise (-accel tcg -cpu max,-rdrand,-rdseed, and
// the host's TSC rate on the kernel's command line: calibrating it against
// the PIT fails under load and the boot hangs). The development host's
// /dev/kvm is PVM, which boots no stock kernel: TCG there.
//
// # Robustness
//
// Every QEMU runs in its own process group with Pdeathsig SIGKILL, its pid
// in its state directory (ReapDir kills what a crashed daemon left). A QMP
// call ends with its context; an agent that breaks the framing, floods the
// port with frames nobody asked for, or stops answering fails its calls
// with ErrAgent or their context's error, never a hang.
package vm
