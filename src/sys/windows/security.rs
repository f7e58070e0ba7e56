//! Privacy on Windows, where files have ACLs rather than modes: who "we" are (the user's SID,
//! and the default owner of our token, which is the Administrators group for an elevated
//! process), whether a file is ours (its owner is one of those), whether it is private (its
//! DACL lets no one else change it), and making a directory private (a protected DACL that
//! grants the user alone, inherited by everything made inside it).
//!
//! "Private" here means that no one but us, SYSTEM and the Administrators may *write*: create,
//! rename or delete entries, change the ACL or the owner. An ACE that lets others only read is
//! tolerated: it cannot take, move or forge a lock (on Unix the mode must be exactly 0700, a
//! stricter rule; some Windows profiles and Wine's synthesized ACLs grant everyone reading).
//!
//! The crate's [`Meta`](super::super::Meta) speaks in Unix terms, so these facts are reported
//! as such: `uid` 0 for ours and 1 for anyone else's (this process's identity says uid 0), and
//! `mode` 0700 (a directory) or 0600 (a file) when private, 0777 or 0666 when not.

use std::io;
use std::path::Path;
use std::sync::OnceLock;
use windows_sys::Win32::Foundation::{CloseHandle, LocalFree, ERROR_SUCCESS, HANDLE};
use windows_sys::Win32::Security::Authorization::{
    ConvertSidToStringSidW, ConvertStringSecurityDescriptorToSecurityDescriptorW, GetSecurityInfo,
    SetNamedSecurityInfoW, SE_FILE_OBJECT,
};
use windows_sys::Win32::Security::{
    EqualSid, GetAce, GetSecurityDescriptorDacl, GetTokenInformation, IsWellKnownSid, TokenOwner,
    TokenUser, WinBuiltinAdministratorsSid, WinCreatorOwnerSid, WinLocalSystemSid,
    ACCESS_ALLOWED_ACE, ACE_HEADER, ACL, DACL_SECURITY_INFORMATION, INHERIT_ONLY_ACE,
    OWNER_SECURITY_INFORMATION, PROTECTED_DACL_SECURITY_INFORMATION, PSECURITY_DESCRIPTOR, PSID,
    TOKEN_OWNER, TOKEN_QUERY, TOKEN_USER,
};
use windows_sys::Win32::System::Threading::{GetCurrentProcess, OpenProcessToken};

/// `ACCESS_ALLOWED_ACE_TYPE` and `ACCESS_DENIED_ACE_TYPE`.
const ACCESS_ALLOWED: u8 = 0;
const ACCESS_DENIED: u8 = 1;

/// The rights that change a directory or file: write data (add a file), append (add a
/// subdirectory), write extended attributes or attributes, delete a child, delete, write the
/// DACL or the owner, and the generic all and write rights.
const WRITE_RIGHTS: u32 =
    0x2 | 0x4 | 0x10 | 0x40 | 0x100 | 0x1_0000 | 0x4_0000 | 0x8_0000 | 0x1000_0000 | 0x4000_0000;

/// This process's user SID and its token's default owner, as owned byte copies.
struct Us {
    user: Vec<u8>,
    owner: Vec<u8>,
    /// The user SID in string form (`S-1-5-21-…`), for the private DACL.
    user_text: String,
}

fn token_sid(class: i32) -> Option<Vec<u8>> {
    let mut token: HANDLE = std::ptr::null_mut();
    // SAFETY: the pseudo-handle of this process is always valid; `token` is an out-pointer.
    if unsafe { OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &mut token) } == 0 {
        return None;
    }
    let mut buf = vec![0u8; 256];
    let mut len = 0u32;
    let (out, size) = (buf.as_mut_ptr().cast(), buf.len() as u32);
    // SAFETY: `token` is open; `buf` is writable for its length; `len` receives the size used.
    let ok = unsafe { GetTokenInformation(token, class, out, size, &mut len) };
    // SAFETY: `token` was opened above and is closed once.
    unsafe { CloseHandle(token) };
    if ok == 0 {
        return None;
    }
    // Both TOKEN_USER and TOKEN_OWNER begin with a pointer to the SID, which points into `buf`.
    let sid: PSID = if class == TokenUser {
        // SAFETY: the call filled `buf` with a TOKEN_USER.
        unsafe { (*(buf.as_ptr() as *const TOKEN_USER)).User.Sid }
    } else {
        // SAFETY: the call filled `buf` with a TOKEN_OWNER.
        unsafe { (*(buf.as_ptr() as *const TOKEN_OWNER)).Owner }
    };
    sid_bytes(sid)
}

/// A copy of the SID at `sid` (its length is `8 + 4 * SubAuthorityCount`).
fn sid_bytes(sid: PSID) -> Option<Vec<u8>> {
    if sid.is_null() {
        return None;
    }
    // SAFETY: a valid SID begins with Revision and SubAuthorityCount bytes.
    let count = unsafe { *(sid as *const u8).add(1) } as usize;
    let len = 8 + 4 * count;
    // SAFETY: a valid SID is `len` bytes long.
    Some(unsafe { std::slice::from_raw_parts(sid as *const u8, len) }.to_vec())
}

fn sid_text(sid: &[u8]) -> Option<String> {
    let mut text: *mut u16 = std::ptr::null_mut();
    // SAFETY: `sid` holds a valid SID; `text` receives a LocalAlloc'd string freed below.
    if unsafe { ConvertSidToStringSidW(sid.as_ptr() as PSID, &mut text) } == 0 {
        return None;
    }
    // SAFETY: the string is NUL-terminated.
    let len = (0..).take_while(|&i| unsafe { *text.add(i) } != 0).count();
    // SAFETY: `text` is valid for `len` units.
    let s = String::from_utf16(unsafe { std::slice::from_raw_parts(text, len) }).ok();
    // SAFETY: allocated by ConvertSidToStringSidW, freed once.
    unsafe { LocalFree(text.cast()) };
    s
}

fn us() -> Option<&'static Us> {
    static US: OnceLock<Option<Us>> = OnceLock::new();
    US.get_or_init(|| {
        let user = token_sid(TokenUser)?;
        let owner = token_sid(TokenOwner).unwrap_or_else(|| user.clone());
        let user_text = sid_text(&user)?;
        Some(Us {
            user,
            owner,
            user_text,
        })
    })
    .as_ref()
}

fn same(a: PSID, b: &[u8]) -> bool {
    // SAFETY: both are valid SIDs.
    unsafe { EqualSid(a, b.as_ptr() as PSID) != 0 }
}

/// Whether `sid` is this user (or the default owner of our token).
fn is_us(sid: PSID) -> bool {
    us().is_some_and(|u| same(sid, &u.user) || same(sid, &u.owner))
}

/// Whether `sid` may be in a private DACL: us, SYSTEM, the Administrators (who can take any
/// file anyway), and CREATOR OWNER (which only stands for the creator of what is made inside).
fn trusted(sid: PSID) -> bool {
    // SAFETY: `sid` is valid; the well-known types are constants.
    is_us(sid)
        || unsafe { IsWellKnownSid(sid, WinLocalSystemSid) } != 0
        || unsafe { IsWellKnownSid(sid, WinBuiltinAdministratorsSid) } != 0
        || unsafe { IsWellKnownSid(sid, WinCreatorOwnerSid) } != 0
}

/// `uid` and `mode` (see the module's docs) of the file open as `handle`.
pub(super) fn ownership(handle: HANDLE, dir: bool) -> io::Result<(u32, u32)> {
    let mut owner: PSID = std::ptr::null_mut();
    let mut dacl: *mut ACL = std::ptr::null_mut();
    let mut sd: PSECURITY_DESCRIPTOR = std::ptr::null_mut();
    // SAFETY: `handle` is open with READ_CONTROL; the out-pointers point into `sd`, which is
    // LocalAlloc'd and freed below.
    let rc = unsafe {
        GetSecurityInfo(
            handle,
            SE_FILE_OBJECT,
            OWNER_SECURITY_INFORMATION | DACL_SECURITY_INFORMATION,
            &mut owner,
            std::ptr::null_mut(),
            &mut dacl,
            std::ptr::null_mut(),
            &mut sd,
        )
    };
    if rc != ERROR_SUCCESS {
        return Err(io::Error::from_raw_os_error(rc as i32));
    }
    let uid = if !owner.is_null() && is_us(owner) {
        0
    } else {
        1
    };
    let private = !dacl.is_null() && dacl_is_private(dacl);
    // SAFETY: `sd` was allocated by GetSecurityInfo and is freed once; nothing from it is used
    // after this.
    unsafe { LocalFree(sd) };
    let mode = match (private, dir) {
        (true, true) => 0o700,
        (true, false) => 0o600,
        (false, true) => 0o777,
        (false, false) => 0o666,
    };
    Ok((uid, mode))
}

/// Whether every ACE that grants a write right to the object itself names a trusted SID.
/// Deny ACEs only take away; inherit-only ACEs do not apply to the object.
fn dacl_is_private(dacl: *mut ACL) -> bool {
    // SAFETY: `dacl` is a valid ACL from GetSecurityInfo.
    let count = unsafe { (*dacl).AceCount };
    for i in 0..count {
        let mut ace: *mut core::ffi::c_void = std::ptr::null_mut();
        // SAFETY: `i` is below the ACL's count; `ace` receives a pointer into the ACL.
        if unsafe { GetAce(dacl, i as u32, &mut ace) } == 0 {
            return false;
        }
        // SAFETY: every ACE begins with an ACE_HEADER.
        let header = unsafe { &*(ace as *const ACE_HEADER) };
        if header.AceFlags as u32 & INHERIT_ONLY_ACE != 0 {
            continue;
        }
        match header.AceType {
            ACCESS_DENIED => continue, // only takes away
            ACCESS_ALLOWED => {}
            // Other allow types (object, callback) are not expected on a file: not private.
            _ => return false,
        }
        // SAFETY: the ACE is an ACCESS_ALLOWED_ACE: its mask, then its SID at SidStart.
        let (mask, sid) = unsafe {
            let allowed = ace as *const ACCESS_ALLOWED_ACE;
            ((*allowed).Mask, &(*allowed).SidStart as *const u32)
        };
        if mask & WRITE_RIGHTS != 0 && !trusted(sid as PSID) {
            return false;
        }
    }
    true
}

/// Gives the directory at `path` a protected DACL that grants this user full control, for it
/// and (inherited) everything made inside it; SYSTEM keeps access, as it has to every profile.
pub(super) fn make_private(path: &Path) -> io::Result<()> {
    let us = us().ok_or_else(|| io::Error::other("cannot read this process's user"))?;
    let sddl: Vec<u16> = format!("D:P(A;OICI;FA;;;{})(A;OICI;FA;;;SY)", us.user_text)
        .encode_utf16()
        .chain(Some(0))
        .collect();
    let mut sd: PSECURITY_DESCRIPTOR = std::ptr::null_mut();
    let no_size = std::ptr::null_mut();
    // SAFETY: `sddl` is NUL-terminated; `sd` receives a LocalAlloc'd descriptor freed below.
    super::handles::done(unsafe {
        ConvertStringSecurityDescriptorToSecurityDescriptorW(sddl.as_ptr(), 1, &mut sd, no_size)
    })?;
    let mut present = 0;
    let mut defaulted = 0;
    let mut dacl: *mut ACL = std::ptr::null_mut();
    // SAFETY: `sd` is valid; the out-pointers are locals.
    let ok = unsafe { GetSecurityDescriptorDacl(sd, &mut present, &mut dacl, &mut defaulted) };
    let wide = super::handles::wide(path);
    let rc = if ok == 0 {
        io::Error::last_os_error().raw_os_error().unwrap_or(1) as u32
    } else {
        let what = DACL_SECURITY_INFORMATION | PROTECTED_DACL_SECURITY_INFORMATION;
        let (name, no_sid, no_acl) = (wide.as_ptr(), std::ptr::null_mut(), std::ptr::null());
        // SAFETY: `wide` is NUL-terminated; `dacl` points into `sd`, alive until freed below.
        unsafe { SetNamedSecurityInfoW(name, SE_FILE_OBJECT, what, no_sid, no_sid, dacl, no_acl) }
    };
    // SAFETY: allocated by the conversion above, freed once.
    unsafe { LocalFree(sd) };
    if rc != ERROR_SUCCESS {
        return Err(io::Error::from_raw_os_error(rc as i32));
    }
    Ok(())
}
